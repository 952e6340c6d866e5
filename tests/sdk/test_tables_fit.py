"""Tables fit the terminal: at 80 and 120 columns no line is wider, and no name or number is cut."""
import re

import pytest

from edgeopt.cli.main import main
from edgeopt_agent.profiles import all_profiles


@pytest.mark.parametrize("columns", [80, 120])
def test_devices_fits_and_keeps_every_name_whole(columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= columns
    cells = re.findall(r"[│┃]\s*([^│┃]*?)\s*(?=[│┃])", out)
    for profile in all_profiles():
        assert profile.name in cells, f"{profile.name} was cut: {out}"
