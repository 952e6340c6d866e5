"""Would edgeopt judge every corpus model's outputs by the right kind if nobody told it? For each case of
scripts/bench_real_models.py: run its FP32 ONNX on the case's evaluation data and let edgeopt decide each
output's kind from evidence alone (names, values, the ONNX op that makes it, the evaluation labels, fed-back
state), as `edgeopt convert` does without --output-kind; set that against the kind the case gives the
benchmark or, for the untuned cases, would give it (what a person who knows the model would say). No
conversion runs; a few minutes for all 22.

    .venv/bin/python scripts/check_kind_inference.py [--models detector,vad,...]

"same": evidence alone picks the given kind. "tensor": no task evidence, judged by SQNR and relative
error (safe, but blind to the task: the kind worth saying with --output-kind). Anything else is a
different task judge than the one the case needs.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import List

import numpy as np

from edgeopt_converters import accuracy as acc
from edgeopt_converters.accuracy.streaming import find_state_pairs
from realbench.cases import CASES, selected
from realbench.run import ort_session, run_outputs


def inferred_rows(name: str) -> List[tuple]:
    """(model, output, given kind, inferred kind, evidence, verdict) for one case."""
    with tempfile.TemporaryDirectory(prefix=f"kinds-{name}-") as tmp:
        case = CASES[name](Path(tmp))
        session = ort_session(case.onnx)
        names = [o.name for o in session.get_outputs()]
        given = list(case.kinds) if case.kinds else [case.kind] + [None] * (len(names) - 1)
        reference = run_outputs(case.onnx, case)
        first = case.feed(case.evaluation, 0)
        step = dict(zip(names, session.run(None, {i.name: first[i.name] for i in session.get_inputs()})))
        state = list(find_state_pairs(first, step).values())
        shapes = [first[i.name].shape for i in session.get_inputs()]
        kinds = acc.decide_kinds(names, reference, {}, state, producers=acc.graph_evidence(case.onnx),
                                 labels=case.labels, input_hw=acc.image_input_hw(shapes))
    rows = []
    for output, want, got in zip(names, given, kinds):
        verdict = ("-" if want is None else "same" if got.kind == want
                   else "tensor" if got.kind == "tensor" else "different")
        rows.append((name, output, want or "-", got.kind, got.why, verdict))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="all", help=f"comma-separated models or groups (all, issue26, untuned): {', '.join(CASES)}")
    args = parser.parse_args(argv)
    print("| model | output | kind the case gives | kind from evidence alone | evidence | |")
    print("|---|---|---|---|---|---|")
    counts = {}
    for name in selected(args.models):
        try:
            rows = inferred_rows(name)
        except Exception as exc:  # a case that cannot run here is a result too
            rows = [(name, "-", "-", "-", f"{type(exc).__name__}: {exc}"[:120], "not run")]
        for row in rows:
            counts[row[-1]] = counts.get(row[-1], 0) + 1
            print("| " + " | ".join(str(x).replace("|", "/") for x in row) + " |", flush=True)
    print("\n" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
