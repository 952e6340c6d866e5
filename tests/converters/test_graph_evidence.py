"""Graph evidence of an output's kind: the op that makes it, through reshapes, reductions and the
branches of an If that read values of the graph around them (as Silero VAD's sample-rate switch)."""
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from edgeopt_converters.accuracy.graph_evidence import graph_evidence


def _branch(name, op):
    return h.make_graph([h.make_node(op, ["p"], [f"{name}_out"], **({"axes": [1]} if op == "Squeeze" else {}))],
                        name, [], [h.make_tensor_value_info(f"{name}_out", T.FLOAT, None)])


def test_an_output_behind_an_if_takes_the_op_both_branches_read(tmp_path):
    nodes = [
        h.make_node("Sigmoid", ["x"], ["p"]),
        h.make_node("ReduceMax", ["x"], ["flag"], keepdims=0),
        h.make_node("Cast", ["flag"], ["cond"], to=T.BOOL),
        h.make_node("If", ["cond"], ["picked"], then_branch=_branch("a", "Identity"),
                    else_branch=_branch("b", "Identity")),
        h.make_node("Identity", ["picked"], ["prob"]),
        h.make_node("Concat", ["x", "x"], ["state"], axis=1),
    ]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 1])],
                         [h.make_tensor_value_info("prob", T.FLOAT, None), h.make_tensor_value_info("state", T.FLOAT, None)])
    path = tmp_path / "if.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    assert {name: g.op for name, g in graph_evidence(path).items()} == {"prob": "Sigmoid", "state": "Concat"}


def test_no_model_no_evidence(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert graph_evidence(tmp_path / "junk.onnx") == {} and graph_evidence(None) == {}
