"""`edgeopt profile`: where an artifact's time goes on this host, per node, from the runtime's profiler.

    from edgeopt.profiling import profile
    result = profile("out")          # every artifact of a conversion, FP32 and INT8 side by side

ONNX artifacts run under onnxruntime's profiler (edgeopt_agent.runners.onnxruntime.profiler). TFLite artifacts
are listed with the reason they cannot be profiled per op from Python. Where a conversion has
FP32 and INT8 ONNX artifacts, op families (convolutions, matrix products, quantize/dequantize,
layout changes...) are compared: which got faster with INT8, which did not, and what the Q/DQ
nodes cost.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from edgeopt_agent import op_profile
from edgeopt_agent.bench.inputs import random_feeds
from edgeopt_agent.runners import open_runner
from edgeopt_agent.runners.onnxruntime.profiler import profile_onnx
from edgeopt_agent.runners.errors import FreeSizeError, InputError
from edgeopt_converters.manifest import bench_inputs
from edgeopt_converters.manifest import read as read_manifest

from .errors import UserError

# Op types grouped by what they do, so FP32 and INT8 graphs (Conv vs QLinearConv) line up.
FAMILIES = {
    "convolution": ("Conv", "FusedConv", "QLinearConv", "ConvInteger", "ConvTranspose", "NhwcConv",
                    "NhwcFusedConv"),
    "matrix product": ("MatMul", "FusedMatMul", "Gemm", "QGemm", "QLinearMatMul", "MatMulInteger",
                       "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "Attention", "MultiHeadAttention"),
    "quantize / dequantize": ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"),
    "layout": ("Transpose", "ReorderInput", "ReorderOutput", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
               "Concat", "QLinearConcat", "Split", "Slice", "Gather", "Pad", "Expand", "Tile", "Cast", "Resize"),
    "pooling": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "QLinearAveragePool",
                "QLinearGlobalAveragePool", "NhwcMaxPool", "ReduceMean", "ReduceMax", "ReduceSum"),
    "elementwise": ("Add", "Mul", "Sub", "Div", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
                    "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "LeakyRelu", "Erf", "Gelu",
                    "BiasGelu", "FastGelu", "Pow", "Sqrt", "Exp"),
    "normalization": ("Softmax", "LayerNormalization", "SkipLayerNormalization", "BatchNormalization",
                      "InstanceNormalization", "QLinearSoftmax"),
}
_FAMILY_OF = {op: family for family, ops in FAMILIES.items() for op in ops}


def family(op_type: str) -> str:
    return _FAMILY_OF.get(op_type, "other")


@dataclass(frozen=True)
class _Artifact:
    key: str
    path: Path
    precision: Optional[str]
    inputs: Optional[List[Dict[str, Any]]] = None  # how the conversion fed it (its manifest): shapes, constants


def _artifacts(path: Path) -> List[_Artifact]:
    """An artifact file, or each artifact of a conversion's OUTDIR."""
    if path.is_file() and path.suffix in (".onnx", ".tflite"):
        return [_Artifact(path.name, path, None)]
    manifest = read_manifest(path)
    return [_Artifact(a.data["key"], manifest.folder / a.data["path"], a.precision, bench_inputs(a.data))
            for a in manifest.artifacts]


def _feeds(path: Path, threads: int, shapes: Sequence[Sequence[int]], seed: int,
           inputs: Optional[List[Dict[str, Any]]]) -> Dict[str, Any]:
    runner = open_runner(path, threads=threads, runtime="onnxruntime")
    runner.load()
    try:
        infos = list(runner.inputs())
    finally:
        runner.close()
    if shapes:
        if len(shapes) != len(infos):
            raise UserError(f"{path.name} has {len(infos)} inputs ({', '.join(i.name for i in infos)}), "
                            f"got {len(shapes)} --input-shape values")
        infos = [replace(info, shape=tuple(shape)) for info, shape in zip(infos, shapes)]
        inputs = None
    try:
        return random_feeds(infos, None, seed, inputs)
    except FreeSizeError as exc:
        raise UserError(f"{path.name}: input '{exc.name}' has a free size on axis {exc.axis}; give every input's "
                        f"shape in order (edgeopt profile --input-shape 1,3,224,224 --input-shape ...)") from None
    except InputError as exc:
        raise UserError(f"{path.name}: {exc}") from None


def profile_artifact(path: Path, threads: Optional[int] = None, runs: int = 20, warmup: int = 3,
                     input_shapes: Sequence[Sequence[int]] = (), seed: int = 0,
                     inputs: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """onnxruntime's per-node profile of one artifact, fed random data of `input_shapes` (in order),
    else shaped as `inputs` describes (the manifest's `bench_inputs`), else as the model declares."""
    if path.suffix == ".tflite":
        return op_profile.unsupported("tflite")
    from edgeopt_agent.bench.spec import available_cpus

    threads = threads or available_cpus()
    result = profile_onnx(str(path), _feeds(path, threads, input_shapes, seed, inputs), threads=threads,
                          runs=runs, warmup=warmup)
    result["threads"] = threads
    return result


def by_family(result: Dict[str, Any]) -> Dict[str, float]:
    totals: Dict[str, float] = {}
    for t in result.get("op_types", []):
        totals[family(t["op_type"])] = totals.get(family(t["op_type"]), 0.0) + t["ms"]
    return totals


def compare(fp32: Dict[str, Any], int8: Dict[str, Any]) -> Dict[str, Any]:
    """FP32 and INT8 of the same model, op family by op family."""
    a, b = by_family(fp32), by_family(int8)
    rows = []
    for name in sorted(set(a) | set(b), key=lambda f: -(a.get(f, 0.0) + b.get(f, 0.0))):
        before, after = a.get(name, 0.0), b.get(name, 0.0)
        rows.append({"family": name, "fp32_ms": round(before, 6), "int8_ms": round(after, 6),
                     "speedup": round(before / after, 3) if before and after else None,
                     "verdict": _verdict(before, after)})
    qdq = b.get("quantize / dequantize", 0.0)
    return {
        "families": rows,
        "fp32_run_ms": fp32["run_ms"], "int8_run_ms": int8["run_ms"],
        "speedup": round(fp32["run_ms"] / int8["run_ms"], 3) if int8["run_ms"] else None,
        "qdq_ms": round(qdq, 6), "qdq_share": round(qdq / int8["node_ms"], 4) if int8["node_ms"] else 0.0,
    }


def _verdict(before: float, after: float) -> str:
    if not before:
        return "only in INT8"
    if not after:
        return "gone in INT8"
    ratio = before / after
    return "faster" if ratio >= 1.1 else ("slower" if ratio <= 1 / 1.1 else "about the same")


def profile(path, threads: Optional[int] = None, runs: int = 20, warmup: int = 3,
            input_shapes: Sequence[Sequence[int]] = (), top: int = 10) -> Dict[str, Any]:
    found = _artifacts(Path(path))
    artifacts = []
    for artifact in found:
        result = profile_artifact(artifact.path, threads, runs, warmup, input_shapes, inputs=artifact.inputs)
        if result.get("nodes") is not None:
            result["nodes"] = result["nodes"][:top]
        artifacts.append({"key": artifact.key, "path": str(artifact.path), "precision": artifact.precision,
                          "profile": result})
    comparisons = []
    onnx = {a["precision"]: a for a in artifacts if a["path"].endswith(".onnx") and a["profile"].get("profiler")}
    if "fp32" in onnx and "int8" in onnx:
        comparisons.append({"fp32": onnx["fp32"]["key"], "int8": onnx["int8"]["key"],
                            **compare(onnx["fp32"]["profile"], onnx["int8"]["profile"])})
    return {"artifacts": artifacts, "comparisons": comparisons}
