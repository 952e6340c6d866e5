"""A quantizer that crashes on a static INT8 is repaired: what it fails on is found and kept in float, and
the failure is listed with what replaced it (issue 36: two real ONNX models got no INT8 at all, and
`failed_artifacts` said nothing)."""
import json

import numpy as np
import pytest

import model_files
from edgeopt.cli.main import main
from edgeopt_converters.precision.crash_repair import nodes_named, smallest_exclusion


def _builds_without(culprits):
    tried = []

    def builds(excluded):
        tried.append(list(excluded))
        return set(culprits) <= set(excluded)

    return builds, tried


@pytest.mark.parametrize("count, culprits", [(6, ["c"]), (40, ["n7"]), (40, ["n3", "n31"]), (9, ["a", "i"])])
def test_the_fewest_exclusions_that_build_are_found_by_halving(count, culprits):
    items = [chr(ord("a") + i) for i in range(count)] if count < 26 else [f"n{i}" for i in range(count)]
    builds, tried = _builds_without(culprits)
    found = smallest_exclusion(items, builds)
    assert sorted(found) == sorted(culprits)
    assert len(tried) <= (count if count <= 16 else 0) + 4 * len(culprits) * count.bit_length()


def test_an_error_names_nodes_directly_through_tensors_and_through_qdq_names(tmp_path):
    onnx = pytest.importorskip("onnx")
    graph = onnx.load(str(model_files.save_double_softmax_onnx(tmp_path / "m.onnx"))).graph
    assert nodes_named(graph, "Only an existing tensor can be modified, 'p64' is not.") == ["softmax64", "to32"]
    assert nodes_named(graph, "while running DequantizeLinear node. Name:'w2_DequantizeLinear'") == ["mm2"]
    assert nodes_named(graph, "Node (relu) Op (Relu) failed") == ["relu"]
    assert nodes_named(graph, "nothing quoted here") == []


def test_a_crashing_quantizer_is_repaired_listed_and_its_int8_judged(tmp_path, capsys):
    model = model_files.save_double_softmax_onnx(tmp_path / "double_softmax.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((64, 8)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", x=rng.standard_normal((128, 8)).astype(np.float32))
    out = tmp_path / "out"
    code = main(["convert", str(model), "--device", "x86-64", "-o", str(out), "--format", "onnx", "--no-timing",
                 "--input-shape", "x=1,8", "--calibration", str(tmp_path / "calib.npz"),
                 "--eval-data", str(tmp_path / "eval.npz")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    [crash] = [f for f in manifest["failed_artifacts"] if f["key"] == "onnx-int8"]
    assert "Only an existing tensor can be modified, 'p64'" in crash["cause"] and crash["step"] == "quantize-onnx-static"
    assert crash["repaired"].startswith("built with named by the error: softmax64")
    int8 = next(a for a in manifest["artifacts"] if a["key"] == "onnx-int8")
    assert (out / int8["path"]).is_file() and int8["accuracy"]["verdict"] in ("ok", "unresolved", "failed")
    assert {"softmax64", "to32"} <= set(int8["float_nodes"])
    assert int8["quantizer_repair"]["attempts"][0]["result"] == "built"
    assert manifest["phases"]["search"] >= 0 and "validate" in manifest["phases"]
    assert "repaired" in captured.out
