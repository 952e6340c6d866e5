"""Fake Jetson boards for the clock tests: fixtures/<board>/sys (sysfs/debugfs) and commands/ (tool output)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Sequence

FIXTURES = Path(__file__).parent / "fixtures"


class Commands:
    """run_command answering from a board's commands/ folder (read at each call); others are absent."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.calls: List[List[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        recorded = self.folder / ("_".join(argv) + ".out")
        if not recorded.is_file():
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return recorded.read_text()


def board_copy(tmp_path: Path, name: str) -> Path:
    """A writable copy of a board, for tests that change its files."""
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target, symlinks=True)
    return target


def gpu_devfreq(root: Path) -> Path:
    """The GPU's devfreq folder in a board tree (resolved through /sys/class/devfreq)."""
    return next(p for p in (root / "sys/class/devfreq").iterdir() if not p.name.endswith(".vic")).resolve()
