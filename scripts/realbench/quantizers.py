"""The quantizers edgeopt is compared with, each at its defaults on the same FP32 ONNX and calibration
data: onnxruntime's quantize_static, quantize_dynamic and weight-only MatMulNBits, and Microsoft Olive's
static and dynamic passes (olive-ai, the bench extra)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict

import numpy as np

from realbench.case import Case


def _reader(case: Case, arrays: Dict[str, np.ndarray]):
    from edgeopt_converters.passes.calibration import FeedReader

    return FeedReader(case.feed(arrays, i) for i in range(len(next(iter(arrays.values())))))


def ort_static(case: Case, fp32: Path, out: Path) -> Path:
    from onnxruntime.quantization import quantize_static
    quantize_static(str(fp32), str(out), _reader(case, case.calibration))
    return out


def ort_dynamic(case: Case, fp32: Path, out: Path) -> Path:
    from onnxruntime.quantization import quantize_dynamic
    quantize_dynamic(str(fp32), str(out))
    return out


def ort_weight_only(case: Case, fp32: Path, out: Path, bits: int) -> Path:
    """onnxruntime's blockwise weight-only MatMul quantizer (MatMulNBits, block 32, symmetric),
    computing with INT8 activations (accuracy_level 4: the fast CPU path; FP32 compute was 0.5x)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=bits, block_size=32, is_symmetric=True,
                                     accuracy_level=4, op_types_to_quantize=("MatMul",))
    quantizer.process()
    if not any(n.op_type == "MatMulNBits" for n in quantizer.model.model.graph.node):
        raise RuntimeError("not applicable: no MatMul with constant weights")
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    return out


def olive(case: Case, fp32: Path, work: Path, mode: str) -> Path:
    from olive.workflows import run

    if case.whole and mode == "static":
        raise RuntimeError("not run: Olive's data loader adds a batch axis, and this model's inputs share none")
    data = work / "olive_data.npz"
    np.savez(data, **case.calibration)
    ident = case.name.replace("-", "_")  # Olive registers the loader by its Python name
    script = work / f"olive_user_script_{ident}_{mode}.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from olive.data.registry import Registry

        @Registry.register_dataset()
        def edgeopt_calibration_{ident}_{mode}(**kwargs):
            arrays = np.load({str(data)!r})
            names = list(arrays.files)
            return [({{k: arrays[k][i] for k in names}}, 0) for i in range(len(arrays[names[0]]))]
    """))
    out_dir = work / f"olive_{mode}"
    passes = {"q": {"type": "OnnxDynamicQuantization"}} if mode == "dynamic" else \
        {"q": {"type": "OnnxStaticQuantization", "data_config": "calibration"}}
    config = {
        "input_model": {"type": "ONNXModel", "model_path": str(fp32)},
        "systems": {"local": {"type": "LocalSystem",
                              "accelerators": [{"device": "cpu", "execution_providers": ["CPUExecutionProvider"]}]}},
        "data_configs": [{"name": "calibration", "user_script": str(script),
                          "load_dataset_config": {"type": f"edgeopt_calibration_{ident}_{mode}"}}],
        "passes": passes, "host": "local", "target": "local", "output_dir": str(out_dir),
        "log_severity_level": 3, "evaluate_input_model": False, "cache_dir": str(work / "olive-cache"),
    }
    run(config)
    found = sorted(out_dir.rglob("*.onnx"))
    if not found:
        raise RuntimeError("Olive wrote no model")
    return found[0]
