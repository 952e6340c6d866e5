"""`edgeopt convert`'s summary fits 80 and 120 columns (into a log too): artifact keys and figures stay
whole, low-value columns are left out first and the caption says so."""
import re

import pytest

from edgeopt.cli.convert import print_summary


def _artifact(key, recommended, p50, speedup):
    output = {"name": "logits", "kind": "classes", "kind_source": "inferred",
              "kind_why": "the evaluation labels are class indices in [0, 10)", "loss_points": -0.25,
              "loss_points_interval": [-0.8, 0.3]}
    return {"key": key, "recommended": recommended, "size_bytes": 71_000, "scheme": None, "float_nodes": [],
            "accuracy": {"verdict": "ok", "worst_output": "logits", "outputs": [output], "top1_accuracy": 98.49,
                         "reason": ""},
            "host_timing": {"p50_ms": p50, "speedup": {"estimate": speedup, "interval": [speedup * 0.98, speedup * 1.02]}
                            if speedup else None}}


MANIFEST = {
    "device": "x86-64", "model": {"source": "example:digits-cnn"}, "host": {"machine": "x86_64"},
    "artifacts": [_artifact("onnx-fp32", False, 0.012, None), _artifact("tflite-fp32", False, 0.007, None),
                  _artifact("onnx-int8-dynamic", False, 0.013, 0.91), _artifact("tflite-int8", True, 0.004, 1.77)],
    "failed_artifacts": [{"key": "tflite-int8-dynamic", "cause": "LiteRT could not prepare the model"}],
    "recommendation": {"basis": "measured", "key": "tflite-int8", "reason": "fastest measured"},
    "notes": [], "warnings": [],
}


@pytest.mark.parametrize("columns", [80, 120])
def test_the_summary_fits_and_keeps_every_key_and_figure_whole(columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(columns))
    print_summary(MANIFEST, "out")
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= columns, out
    cells = [c.strip() for c in re.findall(r"[│┃]([^│┃]*)(?=[│┃])", out)]
    for artifact in MANIFEST["artifacts"] + MANIFEST["failed_artifacts"]:
        key = artifact["key"] + (" *" if artifact.get("recommended") else "")
        assert key in cells, f"{key} was cut: {out}"
    assert "1.77x" in out and "output logits: judged as classes (the evaluation labels" in out
    if columns == 80:
        assert "left out at this width: p50 ms" in out
