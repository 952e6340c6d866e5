"""Small real models the tests build: ONNX through the onnx helper API, TFLite through litert-torch."""
from __future__ import annotations

import numpy as np
import pytest

MATMUL_WEIGHTS = np.random.default_rng(7).standard_normal((16, 8)).astype(np.float32)


def save_matmul_relu(path, batch_dim, weights=None):
    """y = relu(x @ W): x [batch_dim, 16] -> y [batch_dim, 8]; batch_dim an int (fixed) or a name.
    `weights` replaces W (a [16, 8] float32 array): a model that computes something else."""
    onnx = pytest.importorskip("onnx", reason="building test models needs the onnx package")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "matmul_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 8])],
        [numpy_helper.from_array(MATMUL_WEIGHTS if weights is None else weights, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def save_int8_cnn_tflite(path):
    """A small CNN quantized to int8 (int8 input and output) by litert-torch's PT2E quantizer.

    Returns (path, the float torch module, an example input).
    """
    torch = pytest.importorskip("torch", reason="building the int8 TFLite model needs torch")
    litert_torch = pytest.importorskip("litert_torch", reason="building the int8 TFLite model needs litert-torch")
    from litert_torch.quantize import pt2e_quantizer, quant_config
    from torchao.quantization.pt2e import quantize_pt2e

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)
    ).eval()
    example = (torch.rand(1, 3, 8, 8),)
    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=False)
    )
    prepared = quantize_pt2e.prepare_pt2e(torch.export.export(module, example).module(), quantizer)
    for _ in range(8):
        prepared(torch.rand(1, 3, 8, 8))
    quantized = quantize_pt2e.convert_pt2e(prepared, fold_quantize=False)
    edge = litert_torch.convert(quantized, example, quant_config=quant_config.QuantConfig(pt2e_quantizer=quantizer))
    edge.export(str(path))
    return path, module, example[0]


def save_dynamic_batch_tflite(path):
    """A float conv net whose TFLite input has a dynamic batch axis (shape_signature -1)."""
    torch = pytest.importorskip("torch", reason="building the TFLite model needs torch")
    litert_torch = pytest.importorskip("litert_torch", reason="building the TFLite model needs litert-torch")

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    edge = litert_torch.convert(module, (torch.rand(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    edge.export(str(path))
    return path


NETS = __import__("pathlib").Path(__file__).resolve().parent / "converters" / "nets.py"


def _nets():
    pytest.importorskip("torch", reason="building the model needs torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("_test_nets", NETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_stateful_vad_onnx(path):
    """Shaped like silero VAD's ONNX: `input` [batch, samples], `state` [2, batch, 8] (axis 0 is
    not the batch), `sr` a scalar int64; outputs `output` [batch, 1] and `stateN`."""
    import torch

    nets = _nets()
    torch.manual_seed(0)
    module = nets.StatefulVadTensorRate().eval()
    torch.onnx.export(module, (torch.randn(1, 64), torch.zeros(2, 1, 8), torch.tensor(16000)), str(path),
                      dynamo=False, input_names=["input", "state", "sr"], output_names=["output", "stateN"],
                      dynamic_axes={"input": {0: "batch", 1: "samples"}, "state": {1: "batch"}})
    return path


def save_stateful_vad_torchscript(path):
    """The same model as TorchScript, whose forward takes the sample rate as an `int`."""
    import torch

    torch.jit.script(_nets().stateful_vad()).save(str(path))
    return path


def save_token_encoder_onnx(path):
    """Shaped like a sentence transformer: `input_ids`, `attention_mask` int64 [batch, seq], seq dynamic."""
    import torch

    ids = torch.zeros(1, 12, dtype=torch.int64)
    torch.onnx.export(_nets().token_encoder().eval(), (ids, torch.ones_like(ids)), str(path), dynamo=False,
                      input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})
    return path


def perturb_onnx_weights(path):
    """The largest weight initializer of an ONNX file, changed as a miscomputing kernel would."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    weight = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    values = numpy_helper.to_array(weight)
    changed = values[::-1].copy() if values.dtype.kind in "iu" else (values * -1.0).astype(values.dtype)
    weight.CopyFrom(numpy_helper.from_array(changed.reshape(values.shape), weight.name))
    onnx.save(model, str(path))


def save_conv_outdir(out, model_sha256):
    """A convert output folder of one Conv (8 -> 16 channels, 3x3, on 1x8x64x64): model.fp32.onnx
    (Conv + Relu), model.int8.onnx (its QDQ twin) and the manifest listing both."""
    import json

    onnx = pytest.importorskip("onnx", reason="building test models needs the onnx package")
    from onnx import TensorProto, helper, numpy_helper

    def save(path, nodes, inits):
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64, 64])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))

    out.mkdir(parents=True)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    save(out / "model.fp32.onnx", [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                                   helper.make_node("Relu", ["c"], ["y"], name="relu")], [w])
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(rng.integers(-100, 100, (16, 8, 3, 3)).astype(np.int8), "wq")]
    save(out / "model.int8.onnx", [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                                   helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
                                   helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
                                   helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                                   helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
                                   helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"])], inits)
    artifacts = [{"key": f"onnx-{p}", "path": f"model.{p}.onnx", "format": "onnx", "precision": p}
                 for p in ("fp32", "int8")]
    (out / "manifest.json").write_text(json.dumps({"schema": "edgeopt.manifest/1", "model": {"sha256": model_sha256},
                                                   "artifacts": artifacts}))
    return out



def save_double_softmax_onnx(path):
    """x [batch, 8] -> MatMul -> Relu -> Softmax computed in float64 -> MatMul -> y [batch, 4]. onnxruntime's
    quantize_static crashes on it (`Only an existing tensor can be modified, 'p64' is not.`): it calibrates
    float tensors only, then sets the range of every Softmax output it quantizes."""
    onnx = pytest.importorskip("onnx", reason="building test models needs the onnx package")
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    rng = np.random.default_rng(11)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), h.make_node("Relu", ["h"], ["r"], name="relu"),
             h.make_node("Cast", ["r"], ["r64"], to=T.DOUBLE, name="to64"),
             h.make_node("Softmax", ["r64"], ["p64"], axis=-1, name="softmax64"),
             h.make_node("Cast", ["p64"], ["p"], to=T.FLOAT, name="to32"),
             h.make_node("MatMul", ["p", "w2"], ["y"], name="mm2")]
    graph = h.make_graph(nodes, "double_softmax", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["batch", 4])],
                         [nh.from_array(rng.standard_normal((8, 64)).astype(np.float32), "w1"),
                          nh.from_array(rng.standard_normal((64, 4)).astype(np.float32), "w2")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_slow_export_factory(path, seconds):
    """A file.py whose `build` returns a Linear(8, 4) that sleeps `seconds` inside torch.onnx.export: one
    long call in the export step, as a big model's export is. Returns the `file.py:build` spec."""
    path.write_text(f"""
import time

import torch
from torch import nn


class SlowToExport(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            time.sleep({seconds})
        return self.fc(x)


def build():
    torch.manual_seed(0)
    return SlowToExport()
""")
    return f"{path}:build"
