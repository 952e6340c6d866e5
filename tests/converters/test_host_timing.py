"""Host timing opens every ONNX artifact so that a session waiting for its turn leaves the cores alone."""
import contextlib
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from edgeopt_converters import pipeline
from edgeopt_converters.cost.host_timing import ORT_SIDE_BY_SIDE
from edgeopt_converters.runtime import open_predictor


def test_onnxruntime_runs_a_model_with_the_side_by_side_settings(tmp_path):
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    predictor = open_predictor(path, 1, ORT_SIDE_BY_SIDE)
    (out,) = predictor.predict({"x": np.array([[-1, 0, 2, -3]], np.float32)})
    assert out.tolist() == [[0, 0, 2, 0]]
    assert predictor.runner.session_config == ORT_SIDE_BY_SIDE


def test_timed_onnx_artifacts_stop_spinning_between_runs_and_others_get_no_onnx_settings(monkeypatch, tmp_path):
    opened = {}

    def fake_open(path, threads, session_config=None):
        opened[path.name] = session_config
        return SimpleNamespace(bound_call=lambda feed: (lambda: None), close=lambda: None)

    monkeypatch.setattr(pipeline, "open_predictor", fake_open)
    monkeypatch.setattr(pipeline, "feed_batch", lambda specs: 1)
    records = [SimpleNamespace(planned=SimpleNamespace(key=f"{fmt}-{p}", format=fmt, precision=p), path=f"{fmt}-{p}",
                               host_timing=None)
               for fmt, p in (("onnx", "fp32"), ("onnx", "int8"), ("tflite", "int8"))]
    ctx = SimpleNamespace(work=tmp_path, threads=1, specs=None, evaluation=SimpleNamespace(first_feed=lambda batch: {}))
    progress = SimpleNamespace(step=lambda *a: contextlib.nullcontext(lambda: None))
    pipeline._time_all(ctx, records, progress, max_rounds=5)
    assert opened == {"onnx-fp32": ORT_SIDE_BY_SIDE, "onnx-int8": ORT_SIDE_BY_SIDE, "tflite-int8": None}
    assert all(r.host_timing is not None for r in records)
