import os
import stat

import pytest

from edgeopt_agent.files import atomic_writer, sha256_file, write_atomically
from edgeopt_agent.values import finite, is_int, is_number


def test_number_checks_refuse_bools_non_finite_and_ints_too_big_for_a_float():
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(3) and is_number(2.5) and is_number(-(10**300))
    assert not is_number(True) and not is_number(float("nan")) and not is_number(float("inf"))
    assert not is_number(10**400) and not is_number("1")


def test_finite_replaces_nan_and_infinity_at_any_depth():
    assert finite({"a": [1.0, float("nan")], "b": (float("-inf"), {"c": 2})}) == {"a": [1.0, None], "b": [None, {"c": 2}]}


def test_write_atomically_replaces_the_file_and_hashes_it(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    write_atomically(target, b"new", durable=True)
    assert target.read_bytes() == b"new"
    assert sha256_file(target) == "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_writer(target, binary=False) as handle:
            handle.write("half")
            raise RuntimeError("disk went away")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_mode_is_honoured_under_the_umask(tmp_path):
    write_atomically(tmp_path / "key", b"secret", mode=0o600)
    write_atomically(tmp_path / "page.html", "<p>", mode=None)
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "page.html").st_mode) == 0o666 & ~umask


def test_read_toml_names_the_file_and_what_it_was_meant_to_be(tmp_path):
    from edgeopt_agent.errors import UserError
    from edgeopt_agent.files import read_toml

    good = tmp_path / "good.toml"
    good.write_text('name = "rpi4"\n')
    assert read_toml(good, "device profile") == {"name": "rpi4"}
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(UserError, match=r"^device profile .*bad\.toml is not valid TOML"):
        read_toml(bad, "device profile")
    with pytest.raises(UserError, match=r"^cannot read config file .*missing\.toml"):
        read_toml(tmp_path / "missing.toml", "config file")
