"""Device profiles' [[priors]] (efficiency fitted on published measurements) and [cpu_peak_tops]: data, validated."""
import pytest

from edgeopt_agent.profiles import ProfileError, load_profile_file

BASE = """
name = "box"
description = "a board"
runtimes = ["ncnn"]
default_threads = 2
power_sensor = "none"
[cpu]
arch = "aarch64"
model = "Cortex-A76"
cores = 4
max_freq_mhz = 2400
isa_features = ["neon"]
[memory]
size_gb = 4
[[recipe]]
format = "onnx"
precision = "fp32"
"""

PRIOR = """
[[priors]]
runtime = "ncnn"
precision = "fp16"
factor = 2.5
rows = 12
heldout_rows = 4
median_error_pct = 11.5
sources = ["ncnn-pi5"]
[priors.kinds]
"fp32/conv" = 1.9
overhead = 3.0
"""


def _profile(tmp_path, text):
    path = tmp_path / "box.toml"
    path.write_text(BASE + text)
    return load_profile_file(path)


def test_a_prior_is_read_with_its_evidence_and_found_by_runtime_and_precision(tmp_path):
    profile = _profile(tmp_path, PRIOR + "[cpu_peak_tops]\nfp32 = 0.07\n")
    prior = profile.prior("ncnn", "fp16")
    assert (prior.factor, prior.rows, prior.heldout_rows, prior.median_error_pct) == (2.5, 12, 4, 11.5)
    assert prior.kinds == {"fp32/conv": 1.9, "overhead": 3.0} and prior.sources == ("ncnn-pi5",)
    assert profile.prior("ncnn", "fp32") is None and profile.prior("tflite", "fp16") is None
    assert profile.cpu_peak_tops == {"fp32": 0.07}


@pytest.mark.parametrize("change, message", [
    (("factor = 2.5", "factor = 0.0"), "factor must be above 0"),
    (('"fp32/conv" = 1.9', '"fp32/conv" = -1.0'), r"kinds.fp32/conv must be above 0"),
    (('runtime = "ncnn"', 'runtime = "tvm"'), "runtime 'tvm' is not one of"),
    (("rows = 12", "rows = 0"), "rows must be at least 1"),
    (("rows = 12\n", ""), "missing key 'rows'"),
])
def test_a_bad_prior_names_the_file_and_what_is_wrong(tmp_path, change, message):
    with pytest.raises(ProfileError, match=message) as caught:
        _profile(tmp_path, PRIOR.replace(*change))
    assert "box.toml" in str(caught.value)


TRANSFER = """
[[transfers]]
precision = "int8"
base = "fp32"
rows = 9
heldout_rows = 4
median_error_pct = 23.5
runtimes = ["ncnn", "tflite"]
"""


def test_a_transfer_check_is_read_and_found_by_precision_and_base(tmp_path):
    check = _profile(tmp_path, PRIOR + TRANSFER).transfer("int8", "fp32")
    assert (check.rows, check.heldout_rows, check.median_error_pct, check.runtimes) == (9, 4, 23.5, ("ncnn", "tflite"))
    assert _profile(tmp_path, PRIOR).transfer("int8", "fp32") is None


@pytest.mark.parametrize("change, message", [
    (('base = "fp32"', 'base = "fp64"'), "base 'fp64' is not one of"),
    (("heldout_rows = 4", "heldout_rows = -1"), "must be at least 0"),
    (('runtimes = ["ncnn", "tflite"]', 'runtimes = ["tvm"]'), "runtimes 'tvm' is not one of"),
])
def test_a_bad_transfer_check_names_the_file_and_what_is_wrong(tmp_path, change, message):
    with pytest.raises(ProfileError, match=message) as caught:
        _profile(tmp_path, TRANSFER.replace(*change))
    assert "box.toml" in str(caught.value)
