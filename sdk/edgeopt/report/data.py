"""What a report is made from, and where it comes from: the fleet store and/or a manifest."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from edgeopt_converters.manifest import read as read_manifest


@dataclass
class ReportData:
    """Rows shaped like the fleet store's answers (see edgeopt.fleet.store) plus a manifest."""

    results: List[Dict[str, Any]] = field(default_factory=list)
    devices: List[Dict[str, Any]] = field(default_factory=list)
    telemetry: List[Dict[str, Any]] = field(default_factory=list)
    gaps: List[Dict[str, Any]] = field(default_factory=list)
    stats: Dict[str, Any] = field(default_factory=dict)
    manifest: Optional[Dict[str, Any]] = None
    profile: Optional[Dict[str, Any]] = None  # edgeopt.profiling.profile() of the conversion's artifacts
    analysis: Optional[Dict[str, Any]] = None  # edgeopt.analysis.analyze() on one board
    history: List[Any] = field(default_factory=list)  # edgeopt.fleet.release_history.ModelHistory per model
    sources: List[str] = field(default_factory=list)  # shown in the header, e.g. "fleet store sqlite:///…"
    generated_at: float = field(default_factory=time.time)

    @property
    def empty(self) -> bool:
        artifacts = self.manifest.get("artifacts") if self.manifest else None
        return not (self.results or self.devices or self.telemetry or artifacts or self.profile or self.analysis
                    or self.history)


def load_report_data(db: Optional[str] = None, outdir: Union[str, Path, None] = None,
                     telemetry_since: Optional[float] = None) -> ReportData:
    """Read the fleet store at URL `db` and/or the manifest in `outdir`.

    With neither, the fleet's default database (edgeopt.fleet.store.default_db_url()).
    telemetry_since: only telemetry at or after this epoch time (None: all of it).
    """
    data = ReportData()
    if outdir is not None:
        manifest = read_manifest(outdir)
        data.manifest = manifest.data
        data.sources.append(f"conversion {manifest.path}")
    if db is not None or outdir is None:
        from edgeopt.fleet.store import open_store

        # A report only reads: a mistyped SQLite path must not quietly create an empty database.
        store = open_store(db, create=False)
        try:
            fill_from_store(data, store, telemetry_since)
            data.sources.append(f"fleet store {store.url}")
        finally:
            store.close()
    return data


def fill_from_store(data: ReportData, store: Any, telemetry_since: Optional[float] = None) -> ReportData:
    """Copy everything the report shows out of an open store."""
    from edgeopt.fleet.release_history import release_history

    data.results = list(store.results())
    data.history = release_history(store.results(latest=False, with_histogram=True))
    data.devices = list(store.devices())
    data.telemetry = list(store.telemetry(since=telemetry_since))
    data.gaps = list(store.gaps())
    data.stats = dict(store.stats())
    return data
