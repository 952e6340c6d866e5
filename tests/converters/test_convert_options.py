"""Each convert option is defined once (edgeopt_converters.options); the CLI and the Python API are
generated from that definition, so they cannot drift apart."""
from pathlib import Path

import click
import pytest

from edgeopt import api
from edgeopt.cli.convert import convert as convert_command
from edgeopt_agent.errors import UserError
from edgeopt_agent.runtimes import FORMATS
from edgeopt_converters.accuracy.kinds import KINDS
from edgeopt_converters.options import ConvertOptions, defaults, specs
from edgeopt_converters.passes.quantize_onnx import CALIBRATION_METHODS


def _cli_params():
    return {p.name: p for p in convert_command.params if isinstance(p, click.Option)}


def test_every_option_is_a_cli_flag_with_its_default_help_and_choices():
    params = _cli_params()
    for name, spec in specs().items():
        assert name in params, f"{name} has no flag in `edgeopt convert`"
        param = params[name]
        assert param.help == spec.help
        if spec.choices:
            assert tuple(param.type.choices) == spec.choices
        if not spec.multiple and defaults()[name] is not None:
            assert param.default == defaults()[name] or str(param.default) == str(defaults()[name])
    assert set(params) - set(specs()) == {"as_json"}, "a CLI flag that is not a convert option"


def test_the_python_api_takes_every_option_by_its_name_and_refuses_others(monkeypatch):
    import edgeopt_converters.pipeline as pipeline

    seen = {}
    monkeypatch.setattr(pipeline, "convert", lambda model, options, progress: seen.setdefault("options", options))
    given = {name: default for name, default in defaults().items() if name not in ("device", "output_dir")}
    api.convert("m.onnx", "rpi4", "out", **given)
    assert seen["options"] == ConvertOptions.read(device="rpi4", output_dir="out")
    with pytest.raises(TypeError, match="unknown convert option.*no_timing"):
        api.convert("m.onnx", "rpi4", no_timing=True)


def test_choice_lists_come_from_the_code_constants():
    params = _cli_params()
    assert tuple(params["calibrate_method"].type.choices) == CALIBRATION_METHODS
    assert tuple(params["formats"].type.choices) == FORMATS
    assert all(kind in params["output_kinds"].help for kind in KINDS)
    assert "--profile" in params["device"].opts and "--device" in params["device"].opts


def test_api_values_are_read_as_the_cli_strings():
    options = ConvertOptions.read(device="rpi4", output_dir="out", input_shape={"x": (1, 3, 8, 8), "sr": ()},
                                  calibration="a.npz", formats="onnx", output_kinds={"y": "classes"},
                                  state=["h=h_out"])
    assert options.input_shape == ("x=1,3,8,8", "sr=")
    assert options.calibration == (Path("a.npz"),) and options.output_dir == Path("out")
    assert options.formats == ("onnx",) and options.output_kinds == {"y": "classes"} and options.state == {"h": "h_out"}
    assert ConvertOptions.read(device="rpi4", input_shape=(1, 3, 8, 8)).input_shape == ("1,3,8,8",)
    assert ConvertOptions(device="rpi4") == ConvertOptions.read(device="rpi4"), "the readers take their own output"


def test_a_build_version_is_read_and_checked():
    assert ConvertOptions.read(device="rpi4", build_version="1.4.0").build_version == "1.4.0"
    assert ConvertOptions.read(device="rpi4").build_version is None
    with pytest.raises(UserError, match="build version 'two words' is not usable"):
        ConvertOptions.read(device="rpi4", build_version="two words")


def test_unknown_keywords_and_out_of_range_values_are_refused_by_name():
    with pytest.raises(TypeError, match="unknown convert option.*input_shapes.*known: device"):
        ConvertOptions.read(device="rpi4", input_shapes="1,3")
    with pytest.raises(UserError, match="--max-accuracy-drop must be 0 or more, got -1"):
        ConvertOptions(device="rpi4", max_accuracy_drop=-1)
    with pytest.raises(UserError, match="--min-cosine must be between -1 and 1"):
        ConvertOptions(device="rpi4", min_cosine=2)
    with pytest.raises(UserError, match="unknown --format 'gguf'"):
        ConvertOptions(device="rpi4", formats=("gguf",))


@pytest.mark.parametrize("given, message", [
    ({"threads": True}, r"--threads must be a whole number, 1 or more, got True \(bool\)"),
    ({"opset": 18.0}, r"--opset must be a whole number, 7 or more, got 18.0 \(float\)"),
    ({"min_cosine": float("nan")}, r"--min-cosine must be a finite number, between -1 and 1, got nan"),
    ({"time_budget": float("inf")}, r"--time-budget must be a finite number, 0 or more, got inf"),
    ({"max_accuracy_drop": False}, r"--max-accuracy-drop must be a finite number, 0 or more, got False \(bool\)"),
    ({"max_metric_drop": "1"}, r"--max-metric-drop must be a finite number, got '1' \(str\)"),
    ({"strict": 1}, r"--strict must be True or False, got 1 \(int\)"),
    ({"time_on_host": "no"}, r"--no-timing \(time_on_host=\) must be True or False, got 'no'"),
    ({"calibrate_method": 3}, r"--calibrate-method must be a string, got 3 \(int\)"),
    ({"output_dir": 3}, r"--output \(output_dir=\) cannot be 3 \(int\); give a path"),
    ({"formats": 5}, r"--format \(formats=\) cannot be 5 \(int\); give one of onnx, .* or a list of them"),
])
def test_api_values_of_the_wrong_type_are_refused_in_one_line_naming_the_option(given, message):
    with pytest.raises(UserError, match=message) as refused:
        api.convert("m.onnx", "rpi4", **given)
    assert "\n" not in str(refused.value)


def test_api_numbers_of_any_numeric_type_are_taken_as_the_options_type():
    import numpy as np

    options = ConvertOptions.read(device=Path("board.toml"), threads=np.int64(2), min_cosine=np.float32(0.5),
                                  time_budget=60, strict=False)
    assert (options.device, options.threads, options.min_cosine, options.time_budget) == ("board.toml", 2, 0.5, 60.0)
    assert type(options.threads) is int and type(options.min_cosine) is float and type(options.time_budget) is float


def test_the_cli_refuses_a_number_that_is_not_finite(capsys):
    from edgeopt.cli.main import main

    assert main(["convert", "m.onnx", "--device", "rpi4", "--min-cosine", "nan"]) == 2
    assert "--min-cosine must be a finite number, between -1 and 1, got nan" in capsys.readouterr().err
