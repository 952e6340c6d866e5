"""`edgeopt report`: one self-contained HTML file with the fleet's results, plots and telemetry.

    from edgeopt.report import load_report_data, write_report
    data = load_report_data(db="sqlite:///fleet.db", outdir="out")   # either or both
    write_report(data, "report.html")

`ReportData` can also be filled by hand with rows shaped like edgeopt.fleet.store's answers.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union

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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(page)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
