"""`deploy(...)`: send a converted model to devices over MQTT and (optionally) wait for their measurements."""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from edgeopt_agent import wire
from edgeopt_agent.wire.broker import BrokerSettings, broker_settings

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
) -> List[Dict[str, Any]]:
    """Send a benchmark job for an artifact of OUTDIR (the recommended one, or `artifact`) to one
    online `device`, every online device of a `profile`, or `all_devices` online.

    The file goes through the broker in chunks (only those a device does not hold yet), or with
    `url` the devices download it from there. The job is signed as a whole with `private_key`
    (default: the key of `edgeopt keys init`, when there is one) unless `unsigned`; the one
    signed job names the devices picked (and the profile, with `profile`), so it serves all of
    them and no other device. Devices refuse it `expires_s` seconds after now, and refuse an
    older build of the same model than the last they accepted unless `allow_downgrade`.
    `bench` holds benchmark options (runs, duration_s, threads...; see
    edgeopt_agent.wire.BENCH_OPTIONS). `all_devices` and `profile` pick at most `max_devices`
    devices (more is refused) and, with `fleet_db` (a fleet store URL), only devices that store
    holds a result from: a retained status alone is no evidence on a broker without an ACL.

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
    chosen = choose_artifact(Path(outdir), artifact, chunk_size)
    key = signing_key(private_key, unsigned)
    settings = broker if isinstance(broker, BrokerSettings) else broker_settings(broker)
    job_id = f"{chosen.key}-{uuid.uuid4().hex[:10]}"

    measured = measured_devices(fleet_db) if fleet_db is not None and device is None else None

    client = HostClient(settings)
    try:
        client.connect()
        targets = select_targets(read_statuses(client), device, profile, all_devices, measured, max_devices)
        _warn_about_signatures(targets, key)
        # One body, signed once, for every device picked: it names them all.
        body = wire.benchmark_body(
            job_id, chosen.sha256, chosen.format, meta=chosen.meta, chunks=None if url else chosen.chunks, url=url,
            size=chosen.size, target=wire.JobTarget(tuple(t.device_id for t in targets), profile),
            lifetime_s=expires_s, release=chosen.release, allow_downgrade=allow_downgrade,
            signer=key.sign_job if key else None, **_with_reference(outdir, chosen, _with_inputs(bench, chosen.inputs)),
        )
        jobs = {target.device_id: wire.job_message(target.device_id, 1, body) for target in targets}
        return Rollout(client, chosen, jobs, progress).run(wait, timeout_s)
    finally:
        client.close()


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
        from edgeopt_converters.board_reference import reference_for_artifact

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
    if path is None:
        log.warning("no signing key (run `edgeopt keys init`): the artifact goes unsigned, "
                    "and agents with a trusted key will refuse it")
        return None
    return SigningKey.load(path)


def _warn_about_signatures(targets: List[DeviceStatus], key: Optional[SigningKey]) -> None:
    for target in targets:
        if target.signatures != "required":
            continue
        if key is None:
            log.warning("%s only runs signed jobs and this deploy is unsigned: it will refuse the job",
                        target.device_id)
        elif target.trusted_key_id and target.trusted_key_id != key.key_id:
            log.warning("%s trusts key %s, this deploy signs with key %s: it will refuse the job",
                        target.device_id, target.trusted_key_id, key.key_id)
