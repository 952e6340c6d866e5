"""`deploy(...)`: send a converted model to devices over MQTT and (optionally) wait for their measurements."""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from edgeopt_agent import wire
from edgeopt_agent.wire.broker import BrokerSettings, broker_settings
from edgeopt_agent.wire.bench_options import BenchOptions
from edgeopt_converters.manifest import BOARD_OVERRIDES, board_options

from ..errors import UserError
from .artifact import choose_artifact
from .keys import SigningKey, default_private_key
from .mqtt import HostClient
from .rollout import ProgressCallback, Rollout
from .targets import DEFAULT_MAX_DEVICES, DeviceStatus, measured_devices, read_statuses, select_targets

log = logging.getLogger(__name__)

PathLike = Union[str, Path]
DEFAULT_BROKER = "127.0.0.1:1883"
DEFAULT_TIMEOUT_S = 300.0


def deploy(
    outdir: PathLike,
    broker: Union[str, BrokerSettings] = DEFAULT_BROKER,
    device: Optional[str] = None,
    profile: Optional[str] = None,
    all_devices: bool = False,
    artifact: Optional[str] = None,
    private_key: Union[PathLike, SigningKey, None] = None,
    wait: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Optional[ProgressCallback] = None,
    *,
    unsigned: bool = False,
    url: Optional[str] = None,
    bench: Optional[Mapping[str, Any]] = None,
    chunk_size: int = wire.DEFAULT_CHUNK_BYTES,
    expires_s: float = wire.DEFAULT_JOB_LIFETIME_S,
    allow_downgrade: bool = False,
    fleet_db: Optional[str] = None,
    max_devices: int = DEFAULT_MAX_DEVICES,
    force: bool = False,
    build_version: Optional[str] = None,
) -> List[Dict[str, Any]]:
    """Send a benchmark job for an artifact of OUTDIR (the recommended one, or `artifact`) to one
    online `device`, every online device of a `profile`, or `all_devices` online.

    The file goes through the broker in chunks (only those a device does not hold yet), or with
    `url` the devices download it from there. The job is signed as a whole with `private_key`
    (default: the key of `edgeopt keys init`, when there is one) unless `unsigned`; the one
    signed job names the devices picked (and the profile, with `profile`), so it serves all of
    them and no other device. Devices refuse it `expires_s` seconds after now, and refuse an
    older build of the same model than the last they accepted unless `allow_downgrade`.
    `bench` holds benchmark options (runs, duration_s, threads...: edgeopt_agent.wire.BenchOptions
    defines each, and an unknown name is a TypeError); the job carries the board configuration the manifest planned
    for the artifact (runtime, precision, threads, fallback_runtimes), which `bench`'s `runtime`,
    `precision` and `threads` override. `all_devices` and `profile` pick at most `max_devices`
    devices (more is refused) and, with `fleet_db` (a fleet store URL), only devices that store
    holds a result from: a retained status alone is no evidence on a broker without an ACL. With
    `fleet_db` each job message is also kept there, and the collector (`edgeopt fleet serve` on that
    database) sends it again until the board answers or the job expires; while this call runs it
    sends a job again itself to a device that has not reacted to it yet.

    A job a picked device's retained status says it will refuse (unsigned, or signed with another key
    than the one it trusts, to a device whose status says `"signatures": "required"`) is not sent: a
    UserError names the devices, unless `force`.

    The job's meta names the build (the manifest's build id and version; `build_version` gives it
    another version, a CI run number say): `edgeopt fleet compare` compares builds by them.

    Returns one dict per device: device_id, job_id, artifact_key, state ("answered", "delivered",
    "timeout"), ok (None while unanswered), error {kind, message}, result (the measurement), meta,
    chunks_sent, chunks_total. With `wait`, blocks until every device answered or `timeout_s`
    passed; without it, until every device has the file (or the timeout).
    """
    if sum((device is not None, profile is not None, bool(all_devices))) != 1:
        raise UserError("say where to deploy: exactly one of device, profile or all_devices")
    if timeout_s <= 0:
        raise UserError(f"timeout must be positive seconds, got {timeout_s}")
    if not 0 < expires_s <= wire.MAX_JOB_LIFETIME_S:
        raise UserError(f"a job may be valid for 1 s to {wire.MAX_JOB_LIFETIME_S / 86400:g} days, "
                        f"got {expires_s:g} s")
    chosen = choose_artifact(Path(outdir), artifact, chunk_size, build_version)
    key = signing_key(private_key, unsigned)
    settings = broker if isinstance(broker, BrokerSettings) else broker_settings(broker)
    job_id = f"{chosen.key}-{uuid.uuid4().hex[:10]}"

    measured = measured_devices(fleet_db) if fleet_db is not None and device is None else None

    client = HostClient(settings)
    try:
        client.connect()
        targets = select_targets(read_statuses(client), device, profile, all_devices, measured, max_devices)
        _check_signatures(targets, key, force)
        # One body, signed once, for every device picked: it names them all.
        body = wire.benchmark_body(
            job_id, chosen.sha256, chosen.format, meta=chosen.meta, chunks=None if url else chosen.chunks, url=url,
            size=chosen.size, target=wire.JobTarget(tuple(t.device_id for t in targets), profile),
            lifetime_s=expires_s, release=chosen.release, allow_downgrade=allow_downgrade,
            signer=key.sign_job if key else None,
            **_with_reference(outdir, chosen, _with_inputs(_with_board(bench, chosen), chosen.inputs)),
        )
        jobs = {target.device_id: wire.job_message(target.device_id, 1, body) for target in targets}
        if fleet_db is not None:
            keep_jobs(fleet_db, jobs.items())
        return Rollout(client, chosen, jobs, progress).run(wait, timeout_s)
    finally:
        client.close()


def keep_jobs(fleet_db: str, jobs: Iterable[Tuple[str, wire.Envelope]], resend_s: Optional[float] = None) -> None:
    """Keep job messages, (device id, envelope), in the fleet database before they are first sent: the
    collector sends each again, first `resend_s` after now (default `edgeopt.fleet.jobs.DEFAULT_RESEND_S`),
    until its board answers or it expires, whatever the broker loses."""
    from ..fleet.jobs import DEFAULT_RESEND_S, JobQueue, job_row
    from ..fleet.store import open_store

    with open_store(fleet_db) as store:
        JobQueue(store.db, resend_s or DEFAULT_RESEND_S).keep(job_row(device_id, envelope)
                                                              for device_id, envelope in jobs)


def _with_board(bench: Optional[Mapping[str, Any]], chosen) -> Dict[str, Any]:
    """The benchmark options (each checked as BenchOptions defines it), with the board configuration
    the manifest planned for the artifact (runtime, engine precision, threads, fallback runtimes);
    `runtime`, `precision` and `threads` in `bench` override it (see edgeopt_converters.manifest.board_options)."""
    options = BenchOptions.read_given(bench or {})
    overrides = {name: options.pop(name, None) for name in BOARD_OVERRIDES}
    planned = board_options(chosen.entry or {}, **overrides)
    planned.update(options)  # any other option the caller gives (its own fallback_runtimes included) wins
    return planned


def _with_inputs(bench: Optional[Mapping[str, Any]], inputs: Optional[List[Dict[str, Any]]]) -> Dict[str, Any]:
    """The benchmark options, with how to feed the artifact's inputs (from its manifest entry)
    unless the caller says otherwise."""
    options = dict(bench or {})
    if inputs is not None and options.get("inputs") is None:
        options["inputs"] = inputs
    return options


def _with_reference(outdir: PathLike, chosen, options: Dict[str, Any]) -> Dict[str, Any]:
    """The options, with the FP32 artifact's outputs the board must reproduce (inside the signed
    body) unless the caller gave a reference or `reference: None`."""
    if "reference" not in options:
        from edgeopt_converters.accuracy.board_reference import reference_for_artifact

        options["reference"] = reference_for_artifact(Path(outdir), chosen.key, options.get("inputs"))
    return options


def signing_key(private_key: Union[PathLike, SigningKey, None], unsigned: bool = False) -> Optional[SigningKey]:
    """The key to sign with: the one given, else the default one if it exists; None if unsigned."""
    if unsigned:
        if private_key is not None:
            raise UserError("give a signing key or ask for an unsigned deploy, not both")
        return None
    if isinstance(private_key, SigningKey):
        return private_key
    path = Path(private_key) if private_key is not None else default_private_key()
    if path is None:  # deploy refuses to send it to a device that requires signed jobs (_check_signatures)
        log.info("no signing key (`edgeopt keys init` makes one): the job goes unsigned")
        return None
    return SigningKey.load(path)


def _check_signatures(targets: List[DeviceStatus], key: Optional[SigningKey], force: bool = False) -> None:
    """Refuse (one line) to send a job that devices will refuse by their retained status: unsigned to a device
    that requires signed jobs, or signed with a key it does not trust. With `force`, one warning instead."""
    required = [t for t in targets if t.signatures == "required"]
    unsigned = [t.device_id for t in required if key is None]
    foreign = [t for t in required if key is not None and t.trusted_key_id and t.trusted_key_id != key.key_id]
    problems = []
    if unsigned:
        problems.append(f"{_names(unsigned)} only run signed jobs (their status says signatures: required) and "
                        "this deploy is unsigned")
    if foreign:
        trusted = ", ".join(sorted({t.trusted_key_id for t in foreign if t.trusted_key_id}))
        problems.append(f"{_names([t.device_id for t in foreign])} trust key {trusted}, and this deploy signs with "
                        f"key {key.key_id if key else '-'}")
    if not problems:
        return
    what = "; ".join(problems) + ": they would refuse the job"
    if force:
        log.warning("%s; sending it anyway (--force)", what)
        return
    raise UserError(f"{what}; sign it with --key FILE, the fleet key whose public key the devices trust "
                    "(`edgeopt keys init` makes one), or pass --force to send it anyway")


def _names(device_ids: List[str], shown: int = 10) -> str:
    more = len(device_ids) - shown
    return ", ".join(device_ids[:shown]) + (f" and {more} more" if more > 0 else "")
