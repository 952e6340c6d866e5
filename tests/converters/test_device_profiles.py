import json
import platform

import pytest
from click.testing import CliRunner

from edgeopt.cli.group import cli
from edgeopt_agent.profiles import ProfileError, all_profiles, load_profile, load_profile_file, profile_names

EXPECTED = {"rpi4", "rpi5", "jetson-nano", "jetson-orin-nano", "jetson-agx-orin", "x86-64"}


def test_every_board_in_the_product_card_has_a_valid_profile():
    assert EXPECTED <= set(profile_names())
    for profile in all_profiles():
        assert profile.recipe and profile.runtimes
        assert 1 <= profile.default_threads <= profile.cpu.cores
        assert ("onnx", "fp32") in {(a.format, a.precision) for a in profile.recipe}


def test_profiles_carry_the_hardware_facts_the_recipes_depend_on():
    assert not load_profile("rpi4").cpu.has("dotprod")
    assert load_profile("rpi5").cpu.has("dotprod")
    nano = load_profile("jetson-nano")
    assert nano.accelerator_supports("fp16") and not nano.accelerator_supports("int8")
    assert "int8" not in nano.precisions
    assert any(a.kind == "dla" for a in load_profile("jetson-agx-orin").accelerators)
    assert load_profile("jetson-orin-nano").accelerator_supports("int8")
    assert load_profile("rpi4").power_sensor == "none"
    assert load_profile("x86-64").power_sensor == "rapl"


def test_unknown_device_names_the_closest_match_and_the_list():
    with pytest.raises(ProfileError) as err:
        load_profile("rpi-4")
    assert "did you mean 'rpi4'" in str(err.value)
    assert "jetson-nano" in str(err.value)


def test_invalid_profile_file_names_the_key(tmp_path):
    bad = tmp_path / "board.toml"
    bad.write_text('name = "board"\ndescription = "x"\nruntimes = ["onnxruntime"]\n'
                   'default_threads = 2\npower_sensor = "none"\n[cpu]\narch = "riscv"\n')
    with pytest.raises(ProfileError, match="arch|missing key"):
        load_profile_file(bad)
    bad.write_text("this is = = not toml")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile_file(bad)


def test_profiles_are_frozen():
    profile = load_profile("rpi4")
    with pytest.raises(Exception):
        profile.default_threads = 1


def test_matches_host_follows_the_machine_architecture():
    assert load_profile("x86-64").matches_host("x86_64")
    assert not load_profile("rpi4").matches_host("x86_64")
    assert load_profile("rpi4").matches_host("aarch64")
    assert load_profile("x86-64").matches_host() == (platform.machine().lower() in ("x86_64", "amd64"))


def test_devices_command_lists_and_describes_boards():
    runner = CliRunner()
    listed = runner.invoke(cli, ["devices", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {p["name"] for p in json.loads(listed.output)} >= EXPECTED
    one = runner.invoke(cli, ["devices", "rpi5"])
    assert one.exit_code == 0
    assert json.loads(one.output)["cpu"]["model"] == "Cortex-A76"
