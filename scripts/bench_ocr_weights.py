"""PP-OCRv4's recognizer on this host: 7-bit signed weights (U8S8 with reduce-range, the x86-64
profile's choice without VNNI) against 8-bit unsigned ones (U8U8, which VPMADDUBSW cannot saturate)
and 8-bit signed ones (U8S8 without reduce-range: exact only where VNNI's VPDPBUSD runs them, and
measured only on such a host).

    .venv/bin/python scripts/bench_ocr_weights.py

The whole graph is quantized by onnxruntime's `quantize_static` (QDQ, per-channel, minmax and
percentile) on the recognizer prepared as edgeopt prepares it (Constant-node weights folded into
initializers, opset 13, onnxruntime's pre-processing), calibrated on the benchmark's 24 LINES (realbench.inputs) and
judged on its 113 evaluation lines by edgeopt's `ctc` verdict; FP32 and every variant are timed in
interleaved rounds (batch 1). Needs `scripts/corpus.py fetch --all` and the bench extra.
"""
from __future__ import annotations

import contextlib
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from realbench.cases.documents import ocr
from realbench.run import ort_session


def prepared(source: Path, work: Path) -> Path:
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from edgeopt_converters.passes.preprocess_onnx import fold_constant_nodes

    model = onnx.load(str(source))
    fold_constant_nodes(model)
    for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim, (1, 3, 48, 320)):
        dim.dim_value = size  # the shape the bench feeds, as `--input-shape 1,3,48,320` fixes it
    onnx.save(version_converter.convert_version(model, 13), str(work / "folded.onnx"))
    with contextlib.chdir(work):  # its shape inference leaves temporary files in the working directory
        quant_pre_process(str(work / "folded.onnx"), str(work / "prepared.onnx"))
    return work / "prepared.onnx"


WEIGHTS = {  # label: (weight type, reduce_range)
    "S8 7-bit (reduce-range)": ("int8", True),
    "U8 8-bit (U8U8)": ("uint8", False),
    "S8 8-bit (VNNI)": ("int8", False),
}


def quantized(model: Path, calibration: np.ndarray, weights: str, reduce_range: bool, method: str,
              out: Path) -> Path:
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": calibration[i:i + 1]} for i in range(len(calibration))])

        def get_next(self):
            return next(self.feeds, None)

    q.quantize_static(str(model), str(out), Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      reduce_range=reduce_range, activation_type=q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8 if weights == "int8" else q.QuantType.QUInt8,
                      calibrate_method=getattr(q.CalibrationMethod, method))
    return out


def main() -> int:
    from hostinfo import cpu_model, int8_flags
    from edgeopt_converters import accuracy as acc
    from edgeopt_converters.precision.host_int8 import int8_kernels_saturate
    from edgeopt_converters.cost.host_timing import time_interleaved

    with tempfile.TemporaryDirectory(prefix="bench-ocr-weights-") as tmp:
        work = Path(tmp)
        case = ocr(work)
        fp32 = prepared(case.onnx, work)
        variants = {"fp32": fp32}
        for label, (weights, reduce_range) in WEIGHTS.items():
            if weights == "int8" and not reduce_range and int8_kernels_saturate():
                print(f"{label}: not measured, this host has no VNNI (its INT8 products would saturate)")
                continue
            for method in ("MinMax", "Percentile"):
                variants[f"{label}, {method.lower()}"] = quantized(
                    fp32, case.calibration["x"], weights, reduce_range, method,
                    work / f"{weights}-{int(reduce_range)}-{method}.onnx")
        sessions = {key: ort_session(path) for key, path in variants.items()}
        images = case.evaluation["x"]
        outputs = {key: np.concatenate([s.run(None, {"x": images[i:i + 1]})[0] for i in range(len(images))])
                   for key, s in sessions.items()}
        one = {"x": images[:1]}
        timed = time_interleaved({key: (lambda s: (lambda: s.run(None, one)))(s) for key, s in sessions.items()},
                                 {key: "fp32" for key in sessions if key != "fp32"}, min_rounds=10, max_rounds=20)
    print(f"Host: {platform.machine()}, {cpu_model()}, {os.cpu_count()} CPUs; {int8_flags()}; load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("| weights, calibrator | verdict | symbols edited vs FP32 | p50 ms | vs FP32 (95%) |")
    print("|---|---|---|---|---|")
    for key, output in outputs.items():
        judged = acc.compare([outputs["fp32"]], [output], names=["softmax"]).outputs[0]
        speedup = timed[key].speedup
        ratio = f"{speedup.estimate:.2f}x [{speedup.low:.2f}, {speedup.high:.2f}]" if speedup else "1.00x"
        print(f"| {key} | {judged.verdict} | {judged.figures['symbol_edits']} edits "
              f"({judged.loss_points.estimate * 100 if judged.loss_points else 0:.2f} points) | "
              f"{timed[key].p50_ms:.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
