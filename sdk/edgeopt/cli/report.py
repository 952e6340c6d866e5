"""`edgeopt report [--db URL] [OUTDIR] -o report.html`."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Optional

import click

from ..errors import UserError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@click.command()
@click.argument("outdir", required=False, type=click.Path(path_type=Path))
@click.option("--db", "db", metavar="URL",
              help="Fleet store: sqlite:///path/fleet.db or postgresql://user@host:port/db "
                   "(without OUTDIR the default: $EDGEOPT_FLEET_DB, else sqlite:///fleet.db).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default="report.html",
              show_default=True, help="The HTML file to write.")
@click.option("--since", metavar="AGE", help="Only telemetry of the last AGE, e.g. 30m, 6h, 2d (default: all).")
@click.option("--title", default="edgeopt report", show_default=True, help="Page title.")
@click.option("--profile", "with_profile", is_flag=True,
              help="Profile OUTDIR's artifacts on this host per op (as `edgeopt profile`) and add the section.")
@click.option("--roofline", "roofline_device", metavar="NAME",
              help="Add OUTDIR's roofline on this board (as `edgeopt analyze --profile NAME`, with --db when given).")
def report(outdir: Optional[Path], db: Optional[str], output: Path, since: Optional[str], title: str,
           with_profile: bool, roofline_device: Optional[str]) -> None:
    """Write one self-contained HTML report (opens offline, no scripts).

    Give the fleet store (--db URL) and/or OUTDIR, the output folder of `edgeopt convert`: results
    per board and artifact, latency distributions, energy against latency, accuracy drop against
    speed-up, telemetry over time, devices, and any message loss.
    """
    from edgeopt.report import load_report_data, write_report

    telemetry_since = time.time() - parse_age(since) if since else None
    data = load_report_data(db=db, outdir=outdir, telemetry_since=telemetry_since)
    if (with_profile or roofline_device) and outdir is None:
        raise UserError("--profile and --roofline need OUTDIR, the output folder of `edgeopt convert`")
    if with_profile:
        from edgeopt.profiling import profile

        data.profile = profile(outdir)
    if roofline_device:
        from edgeopt.analysis import analyze

        data.analysis = analyze(outdir, roofline_device, db=db)
    path = write_report(data, output, title=title)
    click.echo(f"report: {path} ({summary(data)})")


def summary(data) -> str:
    if data.empty:
        return "nothing to report yet"
    from ..report.text import count

    parts = [count(len(data.results), "result"), count(len(data.devices), "device"),
             count(len(data.telemetry), "telemetry sample")]
    if data.manifest:
        parts.append(count(len(data.manifest["artifacts"]), "converted artifact"))
    return ", ".join(parts)


def parse_age(value: str) -> float:
    """"90s", "30m", "6h", "2d" (or bare seconds) → seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
    if not match:
        raise UserError(f"--since takes an age like 30m, 6h or 2d; got '{value}'")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]
