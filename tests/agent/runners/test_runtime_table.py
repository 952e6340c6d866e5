"""The runtime table is the one list of runtimes: everything else is read from it."""
import pytest

from edgeopt_agent import profiles, runtimes
from edgeopt_agent.runners import base, detect_format


@pytest.mark.parametrize("runtime", runtimes.TABLE, ids=lambda r: r.name)
def test_every_row_names_a_runner_and_a_check_that_exist(runtime):
    assert issubclass(runtime.runner_class(), base.Runner)
    assert callable(runtimes.load(runtime.available))
    assert runtime.formats and set(runtime.formats) <= set(runtimes.FORMATS)
    for hook in (runtime.spec_options, runtime.profiler):
        assert hook is None or callable(runtimes.load(hook))


def test_the_lists_are_read_from_the_table():
    assert runtimes.RUNTIMES == tuple(r.name for r in runtimes.TABLE)
    assert set(runtimes.ENGINE_RUNTIMES) == {"tensorrt", "onnxruntime-tensorrt"}
    assert set(runtimes.GPU_RUNTIMES) == {"tensorrt", "onnxruntime-tensorrt", "onnxruntime-cuda"}
    assert runtimes.FORMAT_RUNTIMES["onnx"][0] == "onnxruntime" and runtimes.FORMAT_RUNTIMES["tflite"] == ("tflite",)
    assert runtimes.FORMAT_RUNTIMES["ncnn"] == ("ncnn",) and runtimes.FORMAT_RUNTIMES["pte"] == ("executorch",)
    assert set(runtimes.PROFILE_RUNTIMES) == {"onnxruntime", "tflite", "tensorrt", "ncnn", "executorch"}
    assert runtimes.FORMATS == ("onnx", "tflite", "ncnn", "pte") and profiles.PRECISIONS == runtimes.PRECISIONS


def test_each_format_is_defined_once_with_its_own_suffix_and_magic():
    defined = [f for r in runtimes.TABLE for f in r.defines]
    assert len({f.name for f in defined}) == len(defined) == len(runtimes.FORMATS)
    assert len({f.suffix for f in defined}) == len(defined)
    magics = [f.magic for f in defined if f.magic is not None]
    assert len(set(magics)) == len(magics)
    for fmt in defined:
        assert fmt.suffix == "." + fmt.name  # the agent's store keeps an artifact as <sha256>.<format>
        assert set(fmt.precisions) <= set(runtimes.PRECISIONS) and "fp32" in fmt.precisions
        assert fmt.roofline in ("own", "onnx", None)
        assert fmt.export_base is None or fmt.export_base.split("-")[0] in runtimes.FORMATS


def test_the_converter_has_each_rows_steps():
    from edgeopt_converters.passes.base import step_class

    for fmt in runtimes.FORMAT_TABLE.values():
        if fmt.export_step is not None:
            for precision in fmt.precisions:
                assert step_class(fmt.export_step)(precision=precision).label()
    for row in runtimes.TABLE:
        if row.engine_step is not None:
            assert step_class(row.engine_step).on_target


def test_what_a_runtime_does_not_offer_is_said_in_its_row():
    assert "INT8" in runtimes.BY_NAME["ncnn"].notes
    assert runtimes.format_of("ncnn").precisions == ("fp32", "fp16")


@pytest.mark.parametrize("name, head, fmt", [
    ("model.fp32.ncnn", b"PK\x03\x04", "ncnn"),
    ("model.int8.pte", b"\x3c\x00\x00\x00ET12", "pte"),
    ("renamed.bin", b"\x3c\x00\x00\x00ET12", "pte"),
    ("renamed.dat", b"\x1c\x00\x00\x00TFL3", "tflite"),
])
def test_detect_format_reads_the_rows_suffixes_and_magic_bytes(tmp_path, name, head, fmt):
    path = tmp_path / name
    path.write_bytes(head + bytes(32))
    assert detect_format(path) == fmt
