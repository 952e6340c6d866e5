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


def test_a_table_in_a_pipe_is_100_columns_unless_asked_wider(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)  # capsys is no terminal: as `| tee log`
    assert main(["devices"]) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in narrow) <= 100
    assert main(["--wide", "devices"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in wide) > 100 and len(wide) < len(narrow)  # each row on one line
    assert main(["devices"]) == 0  # --wide held for that command only
    assert capsys.readouterr().out.splitlines() == narrow
