"""`edgeopt quickstart`: convert, deploy, benchmark, collect and report, all on this machine."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .output import console, table


@click.command()
@click.option("-o", "--output", "output_dir", default="quickstart-out", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Folder for everything the run makes.")
@click.option("--broker", metavar="HOST:PORT", help="Use this MQTT broker instead of starting a local one.")
@click.option("--device-id", default="quickstart-x86", show_default=True, help="Id of the local agent.")
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds to wait for each step that depends on the agent.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary instead of tables.")
def quickstart(output_dir, broker, device_id, timeout_s, as_json):
    """Run the whole product on this machine with a bundled example.

    Starts a broker (unless --broker), a local edgeopt-agent with the x86-64 profile and a
    collector; converts example:digits-cnn, deploys the recommended artifact to the agent as a
    signed artifact over MQTT, stores the agent's measurement in SQLite, prints the fleet tables
    and writes an HTML report. Everything it started is stopped at the end.
    """
    from edgeopt_converters.progress import ProgressReporter, terminal_progress

    from ..fleet import views
    from ..quickstart import QuickstartOptions, run_quickstart

    options = QuickstartOptions(output_dir=output_dir, broker=broker, device_id=device_id, timeout_s=timeout_s)
    if as_json:
        result = run_quickstart(options, lambda text: None, ProgressReporter())
        click.echo(json.dumps({
            "output_dir": str(result.output_dir), "db": result.db_url, "report": str(result.report),
            "recommended": result.manifest["recommended"], "deployments": result.deployments,
            "devices": result.devices, "results": result.results,
        }, indent=2, default=str))
        return
    with terminal_progress() as progress:
        result = run_quickstart(options, lambda text: progress.say(f"• {text}"), progress)
    shown = console()
    for title, columns, rows in (("devices", views.DEVICES, result.devices), ("results", views.RESULTS, result.results)):
        headers, cells = views.cells(columns, rows)
        shown.print(table(headers, cells, title=title))
    shown.print(f"report: {result.report}", markup=False)
    shown.print(f"fleet database: {result.db_url}  (try: edgeopt fleet results --db {result.db_url})", markup=False)
