"""The runtime table is the one list of runtimes: everything else is read from it."""
import pytest

from edgeopt_agent import profiles, runtimes
from edgeopt_agent.runners import availability, base


@pytest.mark.parametrize("runtime", runtimes.TABLE, ids=lambda r: r.name)
def test_every_row_names_a_runner_and_a_check_that_exist(runtime):
    assert issubclass(runtime.runner_class(), base.Runner)
    module, _, name = runtime.available.partition(":")
    assert callable(getattr(availability, name)) and module == "availability"
    assert runtime.formats and set(runtime.formats) <= set(runtimes.FORMATS)


def test_the_lists_are_read_from_the_table():
    assert runtimes.RUNTIMES == tuple(r.name for r in runtimes.TABLE)
    assert set(runtimes.ENGINE_RUNTIMES) == {"tensorrt", "onnxruntime-tensorrt"}
    assert set(runtimes.GPU_RUNTIMES) == {"tensorrt", "onnxruntime-tensorrt", "onnxruntime-cuda"}
    assert runtimes.FORMAT_RUNTIMES["onnx"][0] == "onnxruntime" and runtimes.FORMAT_RUNTIMES["tflite"] == ("tflite",)
    assert set(runtimes.PROFILE_RUNTIMES) == {"onnxruntime", "tflite", "tensorrt"}
    assert profiles.FORMATS == runtimes.FORMATS and profiles.PRECISIONS == runtimes.PRECISIONS
