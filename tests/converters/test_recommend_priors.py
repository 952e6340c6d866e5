"""For a board of another architecture the recommendation ranks runtimes with the profile's efficiency priors
(fitted on published measurements), names their evidence, and says where there is none."""
import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.graph_cost import analyze_onnx
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
    # no published measurement of these on a Pi 5: listed, not ranked, not tied
    assert "onnx-int8 (no published measurement of onnxruntime at int8 on rpi5)" in rec.reason
    assert "ncnn-fp32 (no published measurement of ncnn at fp32 on rpi5)" in rec.reason
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
