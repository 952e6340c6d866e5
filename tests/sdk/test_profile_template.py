"""`edgeopt devices --template NAME [-o FILE]`: a custom board's TOML that loads as a profile."""
import dataclasses
import sys

import pytest

from edgeopt.cli.main import main
from edgeopt_agent.profiles import load_profile, profile_names

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


@pytest.mark.parametrize("source", profile_names())
def test_the_template_loads_as_the_profile_it_was_copied_from_under_its_new_name(source, tmp_path, capsys):
    path = tmp_path / "mybox.toml"
    assert main(["devices", "--template", source, "-o", str(path)]) == 0
    assert "--profile" in capsys.readouterr().out
    loaded = load_profile(str(path))
    assert loaded == dataclasses.replace(load_profile(source), name="mybox")
    # A template of the custom file is the same board again: nothing is lost on the way.
    again = tmp_path / "again.toml"
    assert main(["devices", "--template", str(path), "-o", str(again)]) == 0
    assert load_profile(str(again)) == dataclasses.replace(loaded, name="again")


def test_every_field_is_explained_and_an_edit_is_honoured(tmp_path, capsys):
    path = tmp_path / "lab-box.toml"
    assert main(["devices", "--template", "rpi5", "-o", str(path)]) == 0
    text = path.read_text()
    lines = text.splitlines()
    section = ""
    for previous, line in zip(lines, lines[1:]):
        if line.startswith("["):
            section = line
        elif "=" in line and not line.startswith("#") and section in ("", "[cpu]", "[memory]", "[[accelerators]]"):
            assert previous.startswith("#"), f"no comment above {line!r}"
    for header in ("[thermal]", "[peak_tops]", "[[recipe]]"):  # tables explained once, above their header
        assert lines[lines.index(header) - 1].startswith("#"), header
    path.write_text(text.replace("cores = 4", "cores = 2").replace("default_threads = 4", "default_threads = 2"))
    assert (load_profile(str(path)).cpu.cores, load_profile(str(path)).default_threads) == (2, 2)
    assert main(["devices", str(path), "--json"]) == 0
    assert '"name": "lab-box"' in capsys.readouterr().out


def test_without_output_it_prints_the_template(capsys):
    assert main(["devices", "--template", "jetson-orin-nano"]) == 0
    data = tomllib.loads(capsys.readouterr().out)
    assert data["name"] == "custom-jetson-orin-nano"
    assert data["accelerators"][0]["precisions"] == ["fp32", "fp16", "int8"]


def test_refuses_to_replace_a_file_or_to_write_a_name_the_commands_would_not_read_as_a_file(tmp_path, capsys):
    path = tmp_path / "mybox.toml"
    path.write_text("kept")
    assert main(["devices", "--template", "rpi4", "-o", str(path)]) == 2
    assert "--force" in capsys.readouterr().err and path.read_text() == "kept"
    assert main(["devices", "--template", "rpi4", "-o", str(path), "--force"]) == 0
    assert load_profile(str(path)).name == "mybox"
    assert main(["devices", "--template", "rpi4", "-o", str(tmp_path / "mybox.txt")]) == 2
    assert "ends in .toml" in capsys.readouterr().err
    assert main(["devices", "--template", "rpi9"]) == 2
    assert "unknown device 'rpi9'" in capsys.readouterr().err
