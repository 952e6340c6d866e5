"""`edgeopt deploy`: send a converted model to devices over MQTT and collect their measurements."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

import click

from edgeopt_agent.wire.bench_options import BenchOptions

from .broker_options import BROKER_OPTIONS, broker_options, broker_settings_from
from .option_alias import hidden_alias
from .option_flags import option_flags
from .output import console, table

PASSWORD_ENV = "EDGEOPT_DEPLOY_PASSWORD"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(click.ParamType):
    """Seconds, or a number with a unit: 90s, 30m, 24h, 7d."""

    name = "DURATION"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if not match or float(match.group(1)) <= 0:
            self.fail(f"{value!r} is not a duration: give seconds or a number with s, m, h or d (e.g. 24h)", param, ctx)
        return float(match.group(1)) * _UNITS[match.group(2) or "s"]



@click.command()
@click.argument("outdir", type=click.Path(path_type=Path))
@click.option("--device-id", "device_id", metavar="ID", help="Deploy to this (online) device.")
@hidden_alias("--device", "--device-id", "device_id", metavar="ID")
@click.option("--profile", metavar="NAME", help="Deploy to every online device of this profile.")
@click.option("--all", "all_devices", is_flag=True, help="Deploy to every online device.")
@click.option("--max-devices", type=click.IntRange(min=1), default=100, show_default=True, metavar="N",
              help="Refuse --all or --profile when they pick more devices than this (a broker without an ACL "
                   "may hold statuses that no agent sent).")
@click.option("--db", "fleet_db", metavar="URL",
              help="The fleet store (e.g. sqlite:///fleet.db): keep the jobs there, so the collector sends each "
                   "again until its device answers or the job expires, whatever the broker loses; with --all or "
                   "--profile, pick only devices it holds a result from.")
@click.option("--artifact", "artifact", metavar="KEY", help="Artifact of the manifest (default: the recommended one).")
@click.option("--key", "key_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Ed25519 private key to sign with (default: $EDGEOPT_SIGNING_KEY, or the key of "
                   "`edgeopt keys init` when there is one).")
@click.option("--unsigned", is_flag=True, help="Send the job unsigned (agents with a trusted key refuse it, so it is not sent to a device "
                   "whose status says it requires signed jobs unless --force).")
@click.option("--url", metavar="URL", help="Let devices download the artifact from this http(s) URL instead of "
                                          "receiving it through the broker.")
@click.option("--wait", is_flag=True, help="Wait for every device's measurement; exit 1 if any failed, timed out "
                                            "or is invalid (its outputs do not match the FP32 reference).")
@click.option("--allow-invalid", is_flag=True, help="With --wait: exit 0 although a result is invalid (still shown).")
@click.option("--timeout", "wait_s", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              metavar="SECONDS",
              help="Seconds to wait for the devices, in all (--bench-timeout: how long a benchmark may take).")
@option_flags(BenchOptions, defaults=False, taken=("--timeout",))
@click.option("--chunk-kb", type=click.IntRange(min=1, max=4096), default=256, show_default=True,
              help="Size of the chunks the artifact travels in.")
@click.option("--expires", "expires_s", type=Duration(), default="24h", show_default=True,
              help="Devices refuse the job after this long (seconds, or 30m, 24h, 7d; at most 30d).")
@click.option("--allow-downgrade", is_flag=True,
              help="Let devices run this artifact although they accepted a newer build of the model before "
                   "(signed into the job).")
@click.option("--force", is_flag=True,
              help="Send the job although a device's status says it will refuse it (unsigned, or signed with a key "
                   "it does not trust).")
@click.option("--build-version", metavar="VERSION",
              help="Name this build for `edgeopt fleet compare` and the report (a release name, a CI run number) "
                   "in place of the version `convert --build-version` gave it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list (one object per device) instead of a table.")
@broker_options(PASSWORD_ENV)
def deploy(outdir: Path, device_id, key_path, unsigned, chunk_kb, as_json, allow_invalid, **options):
    """Send the recommended artifact of OUTDIR (an `edgeopt convert` output) to devices as a benchmark job.

    The file travels through the broker in chunks (a device that already holds some gets only
    the rest). The whole job (artifact, bench options, target devices, validity) is signed with
    your Ed25519 key, so agents with a trusted key run nothing else, each job once, before it
    expires, and never an older build of the model unless you say --allow-downgrade.
    A job that a device's status says it will refuse (unsigned, or signed with a key it does not
    trust) is not sent unless --force.
    Devices are picked from the broker's retained status messages: --device-id ID, --profile NAME
    (its online devices) or --all; --all and --profile pick at most --max-devices, and with
    --db only devices the fleet store has results from. With --wait, shows progress until each
    device answered and prints their measurements.
    """
    from ..deploy import deploy as run_deploy
    from ..deploy import signing_key

    bench = {name: options.pop(name) for name in BenchOptions.specs() if name in options}
    settings = broker_settings_from(PASSWORD_ENV, **{name: options.pop(name) for name in BROKER_OPTIONS})
    key = signing_key(key_path, unsigned)
    display = ProgressDisplay(options["wait"])
    try:  # what is left of `options` are the deploy API's own keywords, named as the flags' values
        rows = run_deploy(outdir, settings, device=device_id, private_key=key, unsigned=key is None,
                          progress=display.update, bench={k: v for k, v in bench.items() if v is not None},
                          chunk_size=chunk_kb * 1024, timeout_s=options.pop("wait_s"), **options)
    finally:
        display.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        signed = f"signed with key {key.key_id}" if key else "unsigned"
        console().print(table(COLUMNS, [row_cells(r) for r in rows], title=f"{rows[0]['job_id']} ({signed})" if rows else "",
                              optional=("energy/inf mJ", "chunks sent", "threads")))
        for row in rows:
            if row.get("error"):
                click.echo(f"{row['device_id']}: {row['error'].get('kind')}: {row['error'].get('message')}", err=True)
            elif invalid(row):
                reasons = "; ".join(str(r) for r in row["result"].get("invalid_reasons") or []) or "no reason given"
                click.echo(f"{row['device_id']}: INVALID: {reasons}", err=True)
            for line in ran_otherwise(row):
                click.echo(f"{row['device_id']}: {line}", err=True)
    if any(failed(r) or (invalid(r) and not allow_invalid) for r in rows):
        click.get_current_context().exit(1)


def failed(row: Dict[str, Any]) -> bool:
    return row["ok"] is False or row["state"] == "timeout"


def invalid(row: Dict[str, Any]) -> bool:
    """The device measured, but its outputs did not match the reference (or the run was invalid otherwise)."""
    result = row.get("result")
    return isinstance(result, dict) and result.get("valid") is False


def ran_otherwise(row: Dict[str, Any]) -> List[str]:
    """Where the board ran otherwise than the job asked: another runtime (and why), fewer threads."""
    result = row.get("result") if isinstance(row.get("result"), dict) else {}
    lines = []
    fallback = result.get("fallback")
    if isinstance(fallback, dict):
        lines.append(f"ran {fallback.get('to')} instead of {fallback.get('from')}: {fallback.get('reason')}")
    if result.get("threads_capped"):
        lines.append(str(result["threads_capped"]))
    return lines


COLUMNS = ["device", "artifact", "runtime", "threads", "state", "p50 ms", "p99 ms", "energy/inf mJ", "chunks sent",
           "result"]


def row_cells(row: Dict[str, Any]) -> List[str]:
    """A device's row: what it ran (the runtime and threads the board used, after any fallback or cap)
    and how it went."""
    result = row.get("result") or {}
    latency = result.get("latency_ms") if isinstance(result.get("latency_ms"), dict) else {}
    error = row.get("error")
    outcome = error.get("kind") if error else {True: "ok", None: "waiting"}.get(row["ok"], "failed")
    if outcome == "ok" and invalid(row):
        outcome = "INVALID"
    return [row["device_id"], row["artifact_key"], str(result.get("runtime") or "-"), str(result.get("threads") or "-"),
            row["state"], _number(latency.get("p50")),
            _number(latency.get("p99")), _number(result.get("energy_per_inference_mj")),
            f"{row['chunks_sent']}/{row['chunks_total']}" if row["chunks_total"] else "-", outcome]


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


class ProgressDisplay:
    """A live progress bar per device on a terminal; one line per change of state otherwise."""

    def __init__(self, wait: bool):
        self.wait = wait
        self._live = None
        self._tasks: Dict[str, Any] = {}
        self._states: Dict[str, str] = {}
        if sys.stderr.isatty():
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                return
            self._live = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[stage]}"), TimeElapsedColumn(),
                                  console=console(stderr=True), transient=False)
            self._live.start()

    def update(self, event) -> None:
        if self._live is not None:
            if event.device_id not in self._tasks:
                self._tasks[event.device_id] = self._live.add_task(event.device_id, total=None, stage="")
            self._live.update(self._tasks[event.device_id], completed=event.chunks_sent,
                              total=event.chunks_wanted or None, stage=_stage(event, self.wait))
            return
        if self._states.get(event.device_id) != event.stage:
            self._states[event.device_id] = event.stage
            click.echo(f"{event.device_id}: {_stage(event, self.wait)}", err=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _stage(event, wait: bool) -> str:
    if event.stage == "transferring":
        return f"sending {event.chunks_wanted} of {event.chunks_total} chunks"
    if event.stage == "delivered":
        return "has the artifact, benchmarking" if wait else "has the artifact"
    if event.stage == "answered":
        return "answered: ok" if event.ok else "answered: failed"
    if event.stage == "timeout":
        return "timed out"
    return "job sent"
