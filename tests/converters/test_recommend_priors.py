"""For a board of another architecture the recommendation ranks runtimes with the profile's efficiency priors
(fitted on published measurements), names their evidence, and says where there is none."""
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from edgeopt_agent.profiles import EfficiencyPrior, TransferCheck, load_profile
from edgeopt_converters.cost.graph_cost import analyze_onnx
from edgeopt_converters.cost.priors import MIN_DONOR_ROWS, estimate, prior_ms
from edgeopt_converters.recommend import recommend

X86 = "x86_64"
EVIDENCE = re.compile(r"predicted with priors fitted on (\d+) published measurements of this board, median error (\d+) %")


def _record(fmt, precision, verdict="ok"):
    accuracy = SimpleNamespace(verdict=verdict, reason="", excellent=True)
    planned = SimpleNamespace(format=fmt, precision=precision, key=f"{fmt}-{precision}", steps=())
    return SimpleNamespace(planned=planned, accuracy=accuracy, host_timing=None, info={})


def _costs(tmp_path, module, shape):
    from edgeopt_converters.passes.export_onnx import OnnxExportOptions, write_onnx

    torch.manual_seed(0)
    path = tmp_path / "model.onnx"
    write_onnx(torch, module.eval(), (torch.zeros(shape),), ["input"], path, {}, OnnxExportOptions().opset)
    return {"onnx-fp32": analyze_onnx(path)}


def _costs_with_int8(tmp_path, module, shape, board):
    """The FP32 graph's cost and that of its INT8 graph as edgeopt quantizes it for the board's CPU."""
    from edgeopt_converters.passes.base import StepContext
    from edgeopt_converters.passes.quantize_onnx import QuantizeOnnxStatic
    from edgeopt_converters.recipe import cpu_int8_options
    from edgeopt_converters.source.tensors import Dataset

    costs = _costs(tmp_path, module, shape)
    data = Dataset({"input": np.random.default_rng(0).random((2,) + shape[1:], dtype=np.float32)}, None, "random")
    ctx = StepContext(None, (), calibration=data, calibration_cache=tmp_path / "calibration.json")
    QuantizeOnnxStatic(cpu_int8_options(board)).run(ctx, tmp_path / "model.onnx", tmp_path / "model.int8.onnx")
    costs["onnx-int8"] = analyze_onnx(tmp_path / "model.int8.onnx")
    return costs


def _prior(runtime, precision, factor, rows=10):
    return EfficiencyPrior(runtime, precision, factor, rows, 3, 20.0, {}, ("ncnn-pi4",))


class SmallDetector(nn.Module):
    """A few strided 3x3 convolutions and a 1x1 head: a convolutional detector in miniature."""

    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for width in (16, 32, 64, 64):
            layers += [nn.Conv2d(c, width, 3, 2, 1), nn.BatchNorm2d(width), nn.SiLU(), nn.Conv2d(width, width, 3, 1, 1),
                       nn.SiLU()]
            c = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Conv2d(c, 85, 1)

    def forward(self, x):
        return self.head(self.body(x))


RPI5 = [("onnx", "fp32"), ("onnx", "int8"), ("tflite", "fp32"), ("ncnn", "fp32"), ("ncnn", "fp16"), ("pte", "fp32")]


def test_the_reason_names_the_evidence_of_each_ranked_runtime_and_what_has_none(tmp_path):
    rpi5 = load_profile("rpi5")
    records = [_record(f, p) for f, p in RPI5]
    rec = recommend(records, rpi5, measured=False, why_predicted="rpi5 is another architecture", host_machine=X86,
                    predicted_ms={}, board_costs=_costs(tmp_path, SmallDetector(), (1, 3, 256, 256)))
    assert rec.basis == "predicted"
    ncnn = rpi5.prior("ncnn", "fp16")
    stated = {int(n) for n, _ in EVIDENCE.findall(rec.reason)}
    assert ncnn.rows in stated and rpi5.prior("onnxruntime", "fp32").rows in stated
    assert f"median error {ncnn.median_error_pct:.0f} %" in rec.reason
    # no published measurement of ncnn FP32 on a Pi 5 (its FP32 model computes in FP16 there): listed, not ranked,
    # not tied; ONNX Runtime INT8 has a published measurement, but no INT8 graph was built to cost it by
    assert "ncnn-fp32 (no published measurement of ncnn at fp32 on rpi5)" in rec.reason
    assert "onnx-int8 (no onnx-int8 graph to cost it by)" in rec.reason
    assert rec.key in {"ncnn-fp16", "onnx-fp32", "pte-fp32", "tflite-fp32"}


def test_a_runtime_whose_artifact_fails_its_accuracy_verdict_is_not_recommended(tmp_path):
    rpi5 = load_profile("rpi5")
    records = [_record("onnx", "fp32"), _record("ncnn", "fp16", verdict="failed")]
    rec = recommend(records, rpi5, measured=False, host_machine=X86, predicted_ms={},
                    board_costs=_costs(tmp_path, SmallDetector(), (1, 3, 128, 128)))
    assert rec.key == "onnx-fp32" and "ncnn-fp16 failed" in rec.reason


def test_a_board_without_published_measurements_says_its_runtimes_tie_by_the_profiles_order(tmp_path):
    agx = load_profile("jetson-agx-orin")
    assert not agx.priors
    costs = _costs(tmp_path, SmallDetector(), (1, 3, 128, 128))
    rec = recommend([_record("onnx", "fp32"), _record("onnx", "fp16")], agx, measured=False, host_machine=X86,
                    predicted_ms={"onnx-fp32": 2.0, "onnx-fp16": 1.0}, board_costs=costs)
    assert "jetson-agx-orin has no published measurements" in rec.reason
    assert "their order is the profile's, not evidence" in rec.reason
    assert not EVIDENCE.search(rec.reason)


@pytest.mark.slow
def test_on_a_pi5_a_yolo_detector_ranks_runtimes_as_the_published_measurements_do(tmp_path):
    """Ultralytics' Raspberry Pi 5 tables (YOLO11n, YOLO26n): ncnn, then ONNX Runtime, ExecuTorch, TFLite."""
    import arch_zoo

    rpi5 = load_profile("rpi5")
    costs = {"onnx-fp32": analyze_onnx(arch_zoo.export("yolo11n", (1, 3, 640, 640), tmp_path))}
    records = [_record(f, p) for f, p in RPI5]
    rec = recommend(records, rpi5, measured=False, host_machine=X86, predicted_ms={}, board_costs=costs)
    assert rec.key == "ncnn-fp16"
    ranked = re.findall(r"(\w+-fp\d+) [\d.]+ ms on ", rec.reason)
    assert ranked == ["ncnn-fp16", "onnx-fp32", "pte-fp32", "tflite-fp32"]


def test_a_runtime_without_int8_evidence_is_transferred_from_its_fp32_priors_by_the_speedup_others_show(tmp_path):
    """No published ONNX Runtime INT8 latency on the board: its FP32 prediction divided by the INT8 speed-up that
    TFLite's and ncnn's own priors predict on the same graphs (geometric mean), quoting that evidence and the
    board's transfer check."""
    check = TransferCheck("int8", "fp32", 9, 4, 23.0, ("ncnn", "tflite"))
    board = replace(load_profile("rpi4"), transfers=(check,), priors=(
        _prior("onnxruntime", "fp32", 6.0), _prior("tflite", "fp32", 3.0), _prior("tflite", "int8", 1.0, rows=7),
        _prior("ncnn", "fp32", 2.0), _prior("ncnn", "int8", 1.5, rows=5)))
    costs = _costs_with_int8(tmp_path, SmallDetector(), (1, 3, 96, 96), board)
    found = estimate(board, "onnx-int8", "onnxruntime", "int8", costs)
    speedups = [prior_ms(board, r, "fp32", costs) / prior_ms(board, r, "int8", costs) for r in ("tflite", "ncnn")]
    assert found.evidence.donors == ("tflite", "ncnn")
    assert found.evidence.speedup == pytest.approx(np.sqrt(speedups[0] * speedups[1]))
    assert found.ms == pytest.approx(prior_ms(board, "onnxruntime", "fp32", costs) / found.evidence.speedup)
    text = found.evidence.text()
    assert "no published measurement of onnxruntime at int8 on this board: estimated from its fp32 priors" in text
    assert "the int8 speed-up tflite and ncnn show here on this graph" in text
    assert "fitted on 12 published measurements" in text  # 7 + 5 INT8 rows of the donors
    assert "median error 23 % on 4 held-out published int8 rows (ncnn, tflite predicted without" in text


def test_own_int8_priors_come_before_a_transfer_and_a_gpu_runtime_gives_a_cpu_runtime_nothing(tmp_path):
    pi4 = replace(load_profile("rpi4"), transfers=(), priors=(
        _prior("onnxruntime", "fp32", 6.0), _prior("onnxruntime", "int8", 4.0), _prior("tflite", "fp32", 3.0),
        _prior("tflite", "int8", 1.0)))
    costs = _costs_with_int8(tmp_path, SmallDetector(), (1, 3, 64, 64), pi4)
    own = estimate(pi4, "onnx-int8", "onnxruntime", "int8", costs)
    assert own.ms == pytest.approx(prior_ms(pi4, "onnxruntime", "int8", costs)) and own.evidence.rows == 10
    orin = replace(load_profile("jetson-orin-nano"), priors=(
        _prior("onnxruntime", "fp32", 6.0), _prior("tensorrt", "fp32", 2.0), _prior("tensorrt", "int8", 1.0)))
    none = estimate(orin, "onnx-int8", "onnxruntime", "int8", costs)
    assert none.ms is None and "nor enough of another runtime on its processor at both int8 and fp32" in none.why_not
    unchecked = estimate(replace(pi4, priors=pi4.priors[:1] + pi4.priors[2:]), "onnx-int8", "onnxruntime", "int8", costs)
    assert "this transfer is not checked against any published measurement" in unchecked.evidence.text()
    # a donor whose INT8 priors rest on fewer than MIN_DONOR_ROWS rows gives nothing
    thin = replace(pi4, priors=(pi4.priors[0], pi4.priors[2], _prior("tflite", "int8", 1.0, rows=MIN_DONOR_ROWS - 1)))
    assert estimate(thin, "onnx-int8", "onnxruntime", "int8", costs).ms is None


class InvertedResiduals(nn.Module):
    """MobileNetV2's block in miniature: 1x1 expand, depthwise 3x3, 1x1 project, ReLU6."""

    def __init__(self):
        super().__init__()
        layers, c = [nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU6()], 16
        for width, stride in ((24, 2), (32, 2), (32, 1)):
            layers += [nn.Conv2d(c, c * 6, 1), nn.ReLU6(), nn.Conv2d(c * 6, c * 6, 3, stride, 1, groups=c * 6),
                       nn.ReLU6(), nn.Conv2d(c * 6, width, 1)]
            c = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


PI4 = [("onnx", "fp32"), ("onnx", "int8"), ("tflite", "fp32"), ("tflite", "int8")]


def test_on_a_pi4_int8_is_ranked_on_int8_evidence_tflites_own_and_onnx_runtimes_transferred(tmp_path):
    rpi4 = load_profile("rpi4")
    costs = _costs_with_int8(tmp_path, InvertedResiduals(), (1, 3, 96, 96), rpi4)
    rec = recommend([_record(f, p) for f, p in PI4], rpi4, measured=False, host_machine=X86, predicted_ms={},
                    board_costs=costs)
    tflite, check = rpi4.prior("tflite", "int8"), rpi4.transfer("int8", "fp32")
    assert f"on tflite (predicted with priors fitted on {tflite.rows} published measurements" in rec.reason
    assert ("on onnxruntime (no published measurement of onnxruntime at int8 on this board: estimated from its fp32 "
            "priors") in rec.reason
    assert f"such transfers' median error {check.median_error_pct:.0f} % on {check.heldout_rows} held-out" in rec.reason
    assert "not ranked" not in rec.reason


@pytest.mark.slow
def test_on_a_pi4_mobilenet_v2s_tflite_int8_is_recommended_as_tflites_published_int8_rows_run_faster(tmp_path):
    """Every published TFLite (XNNPACK) INT8 row on a Pi 4 ran 1.7-3.0x faster than FP32 of the same model: for
    MobileNetV2 with ONNX and TFLite artifacts the recommendation is TFLite INT8, predicted faster than FP32."""
    import arch_zoo
    from edgeopt_converters.recipe import cpu_int8_options

    rpi4 = load_profile("rpi4")
    fp32 = arch_zoo.export("mobilenet_v2", (1, 3, 224, 224), tmp_path)
    costs = {"onnx-fp32": analyze_onnx(fp32)}
    from edgeopt_converters.passes.base import StepContext
    from edgeopt_converters.passes.quantize_onnx import QuantizeOnnxStatic
    from edgeopt_converters.source.tensors import Dataset

    data = Dataset({"input": np.random.default_rng(0).random((2, 3, 224, 224), dtype=np.float32)}, None, "random")
    ctx = StepContext(None, (), calibration=data, calibration_cache=tmp_path / "calibration.json")
    QuantizeOnnxStatic(cpu_int8_options(rpi4)).run(ctx, fp32, tmp_path / "int8.onnx")
    costs["onnx-int8"] = analyze_onnx(tmp_path / "int8.onnx")
    rec = recommend([_record(f, p) for f, p in PI4], rpi4, measured=False, host_machine=X86, predicted_ms={},
                    board_costs=costs)
    assert rec.key == "tflite-int8"
    ms = {k: float(v) for k, v in re.findall(r"(\w+-\w+) ([\d.]+) ms on ", rec.reason)}
    assert ms["tflite-int8"] * 1.05 <= min(ms["tflite-fp32"], ms["onnx-fp32"])
