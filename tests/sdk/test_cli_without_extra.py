"""On a board (no `cli` extra) the `edgeopt` command says in one line what to install."""
from __future__ import annotations

import subprocess
import sys

import pytest


def run_edgeopt_without(blocked, *args):
    code = (
        "import sys\n"
        + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
        + "from edgeopt.cli.main import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("blocked", [("click",), ("rich", "pygments")])
def test_a_missing_cli_package_is_one_line_naming_the_extra(blocked):
    result = run_edgeopt_without(blocked, "devices")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: the Python package '{blocked[0]}' is not installed")
    assert lines[0].endswith("install it with: pip install 'edgeopt[cli]'")


def test_with_the_cli_packages_the_same_entry_runs_the_command():
    result = run_edgeopt_without((), "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: edgeopt" in result.stdout
