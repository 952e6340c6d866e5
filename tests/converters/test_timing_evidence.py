"""What a conversion records about its speed figures: the board's roofline predictions per artifact
and the host's speed-relevant CPU flags."""
from edgeopt_converters.cost import timing_evidence
from edgeopt_converters.cost.timing_evidence import SPEED_FLAGS, host_simd, predicted_entries

ARTIFACTS = [("onnx-fp32", "onnx", "fp32"), ("onnx-int8", "onnx", "int8"), ("tflite-fp32", "tflite", "fp32"),
             ("tflite-int8", "tflite", "int8"), ("onnx-fp16", "onnx", "fp16")]


def test_each_artifact_gets_its_graphs_prediction_and_speedup_against_fp32_of_its_format():
    entries = predicted_entries(ARTIFACTS, {"onnx-fp32": 2.0, "onnx-int8": 0.5})
    assert entries["onnx-int8"] == {"p50_ms": 0.5, "speedup_vs_fp32": 4.0, "method": "roofline", "graph": "onnx-int8"}
    assert entries["onnx-fp32"]["speedup_vs_fp32"] == 1.0
    # TFLite graphs are not analysed: the ONNX graph of the same precision (same arithmetic) stands in.
    assert entries["tflite-int8"] == {"p50_ms": 0.5, "speedup_vs_fp32": 4.0, "method": "roofline", "graph": "onnx-int8"}
    assert entries["onnx-fp16"] is None  # no prediction for its graph


def test_without_predictions_nothing_is_claimed():
    assert predicted_entries(ARTIFACTS, {}) == {key: None for key, _, _ in ARTIFACTS}
    lone = predicted_entries([("onnx-int8", "onnx", "int8")], {"onnx-int8": 0.5})
    assert lone["onnx-int8"]["speedup_vs_fp32"] is None  # no FP32 prediction to compare with


def test_host_simd_keeps_the_speed_relevant_flags_in_a_fixed_order(monkeypatch):
    monkeypatch.setattr(timing_evidence, "cpu_flags", lambda: frozenset({"fpu", "fma", "avx2", "sse4_2", "avx512_vnni"}))
    assert host_simd() == ["sse4_2", "avx2", "fma", "avx512_vnni"]
    assert set(host_simd()) <= set(SPEED_FLAGS)
