"""Fake boards for the sensor tests: sysfs trees and recorded command output under fixtures/.

fixtures/<board>/sys/...                      a sysfs tree in the kernel's real layout and units
fixtures/<board>/commands/<argv joined>.out   what the command printed on the board
fixtures/<board>/commands/<argv joined>.rc    its exit status, when it was not 0
fixtures/<board>/commands/tegrastats.txt      lines tegrastats printed on the board
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import pytest

from edgeopt_agent.sensors.base import CommandError

FIXTURES = Path(__file__).parent / "fixtures"


class RecordedCommands:
    """A run_command that answers from a board's recorded output; other programs are absent."""

    def __init__(self, folder: Path, overrides: Dict[str, str] = None):
        self.folder = folder
        self.overrides = dict(overrides or {})
        self.calls: List[List[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        key = "_".join(argv)
        if key in self.overrides:
            return self.overrides[key]
        out, rc = self.folder / f"{key}.out", self.folder / f"{key}.rc"
        if not out.is_file():
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        output = out.read_text()
        status = int(rc.read_text()) if rc.is_file() else 0
        if status != 0:
            raise CommandError(argv, status, output)
        return output


@pytest.fixture
def commands() -> Callable[..., RecordedCommands]:
    def make(board: str, **overrides: str) -> RecordedCommands:
        return RecordedCommands(FIXTURES / board / "commands", overrides)

    return make


@pytest.fixture
def board(tmp_path: Path) -> Callable[[str], Path]:
    """A writable copy of a board's tree, for tests that change sensor files over time."""

    def make(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(FIXTURES / name, target, symlinks=True)
        return target

    return make


def _write_atomically(path: Path, text: str) -> None:
    """Replace a file's content the way sysfs appears to readers: never half-written."""
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(text + "\n")
    os.replace(temporary, path)


@pytest.fixture
def fake_tegrastats(tmp_path: Path) -> Callable[[str], Path]:
    """A `tegrastats` program on a folder of its own that prints a board's recorded lines."""

    def make(name: str) -> Path:
        folder = tmp_path / f"bin-{name}"
        folder.mkdir()
        program = folder / "tegrastats"
        lines = (FIXTURES / name / "commands" / "tegrastats.txt").read_text().splitlines()
        program.write_text(
            f"#!{sys.executable}\n"
            "import sys, time\n"
            "interval = int(sys.argv[sys.argv.index('--interval') + 1]) / 1000\n"
            f"lines = {lines!r}\n"
            "while True:\n"
            "    for line in lines:\n"
            "        print(line, flush=True)\n"
            "        time.sleep(interval)\n"
        )
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
        return folder

    return make


@pytest.fixture
def rewrite() -> Callable[[Path, str], None]:
    return _write_atomically
