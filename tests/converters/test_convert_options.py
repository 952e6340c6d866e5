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


def test_unknown_keywords_and_out_of_range_values_are_refused_by_name():
    with pytest.raises(TypeError, match="unknown convert option.*input_shapes.*known: device"):
        ConvertOptions.read(device="rpi4", input_shapes="1,3")
    with pytest.raises(UserError, match="--max-accuracy-drop must be 0 or more, got -1"):
        ConvertOptions(device="rpi4", max_accuracy_drop=-1)
    with pytest.raises(UserError, match="--min-cosine must be between -1 and 1"):
        ConvertOptions(device="rpi4", min_cosine=2)
    with pytest.raises(UserError, match="unknown --format 'gguf'"):
        ConvertOptions(device="rpi4", formats=("gguf",))
