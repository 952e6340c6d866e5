"""`edgeopt report`: one self-contained HTML file with the fleet's results, plots and telemetry.

    from edgeopt.report import load_report_data, write_report
    data = load_report_data(db="sqlite:///fleet.db", outdir="out")   # either or both
    write_report(data, "report.html")

`ReportData` can also be filled by hand with rows shaped like edgeopt.fleet.store's answers.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from edgeopt_agent.files import atomic_writer

from ..errors import UserError
from .data import ReportData, load_report_data
from .page import render_report

__all__ = ["ReportData", "load_report_data", "render_report", "write_report"]


def write_report(data: ReportData, path: Union[str, Path], title: str = "edgeopt report") -> Path:
    """Render and write the report; the file appears whole or not at all."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder; give the report's file name, e.g. -o {path / 'report.html'}")
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: folder {path.parent} does not exist")
    page = render_report(data, title=title)
    with atomic_writer(path, binary=False) as handle:
        handle.write(page)
        os.fchmod(handle.fileno(), 0o644)  # a report is meant to be shared, whatever the umask
    return path
