"""Bounded fuzzing of model files through the benchmark child: mutated ONNX and TFLite files.

Each mutant (bit flips, truncation, a duplicated or zeroed stretch) goes through `run_benchmark`
as the agent runs it, in the isolated child. Whatever the runtime makes of it, the answer is a
result: it ran, or it failed with one of the known kinds and a message (a crash of the child is
such a result too), and it can be sent as a result message. Seeds are fixed: a failure names the
case to replay.
"""
from __future__ import annotations

import random
import time
from typing import Tuple

import pytest

from edgeopt_agent import wire
from edgeopt_agent.bench import (BAD_ARTIFACT, BAD_INPUT, CRASH, OUT_OF_MEMORY, RUNTIME_ERROR, TIMEOUT, UNSUPPORTED,
                                 BenchmarkSpec, run_benchmark)
from edgeopt_agent.bench.failures import classify
from edgeopt_agent.errors import UserError

KINDS = {BAD_ARTIFACT, BAD_INPUT, UNSUPPORTED, OUT_OF_MEMORY, CRASH, TIMEOUT, RUNTIME_ERROR}


def conv_net_onnx(path):
    """Conv -> Relu -> Reshape (shape from an initializer) -> MatMul -> Add -> Softmax: more structure to break."""
    onnx = pytest.importorskip("onnx", reason="building test models needs the onnx package")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv_b"),
        numpy_helper.from_array(np.array([-1, 144], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(rng.standard_normal((144, 5)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv", pads=[0, 0, 0, 0]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "flat_shape"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc_w"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "fc_b"], ["logits"], name="bias"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def mutate(rng: random.Random, data: bytes) -> Tuple[str, bytes]:
    mutant = bytearray(data)
    action = rng.choice(("flip", "flip", "truncate", "duplicate", "zero"))
    if action == "flip":
        count = rng.randint(1, 8)
        for _ in range(count):
            index = rng.randrange(len(mutant))
            mutant[index] ^= 1 << rng.randrange(8)
        return f"{count} bit flip(s)", bytes(mutant)
    if action == "truncate":
        keep = rng.randrange(len(mutant))
        return f"truncated to {keep} bytes", bytes(mutant[:keep])
    start = rng.randrange(len(mutant))
    end = min(len(mutant), start + rng.randint(1, 512))
    if action == "duplicate":
        at = rng.randrange(len(mutant))
        mutant[at:at] = mutant[start:end]
        return f"bytes {start}-{end} copied to {at}", bytes(mutant)
    mutant[start:end] = bytes(end - start)
    return f"bytes {start}-{end} zeroed", bytes(mutant)


def benchmark_outcome(path):
    """What the agent answers for this file: the result, or the error of a refusal before the child."""
    spec = BenchmarkSpec(artifact=str(path), runs=2, duration_s=0, warmup_runs=1, warmup_s=0, max_duration_s=0.5,
                         idle_s=0, threads=1, timeout_s=20, memory_limit_mb=2048)
    try:
        return run_benchmark(spec)
    except UserError as exc:  # as daemon/jobs.py answers it
        return {"ok": False, "error": classify(exc)}


def fuzz(source, suffix, count, seed, tmp_path):
    rng = random.Random(seed)
    original = source.read_bytes()
    kinds = {}
    started = time.monotonic()
    for number in range(count):
        label, data = mutate(rng, original)
        path = tmp_path / f"mutant-{number}{suffix}"
        path.write_bytes(data)
        result = benchmark_outcome(path)
        case = f"seed {seed} case {number}: {label}"
        assert isinstance(result.get("ok"), bool), case
        if not result["ok"]:
            assert result["error"]["kind"] in KINDS, (case, result["error"])
            assert result["error"]["message"].strip(), case
        body = wire.result_body("fuzz", wire.BENCHMARK_JOB, "0" * 32, result=result)
        wire.Envelope(device_id="fuzz-dev", seq=number + 1, type=wire.RESULT_TYPE, body=body).encode()
        kind = "ok" if result["ok"] else result["error"]["kind"]
        kinds[kind] = kinds.get(kind, 0) + 1
        path.unlink()
    print(f"{count} {suffix} mutants in {time.monotonic() - started:.1f} s: {kinds}")
    return kinds


def no_children_left():
    psutil = pytest.importorskip("psutil")
    return [p.pid for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE and "edgeopt_agent.bench.child" in " ".join(p.cmdline())] == []


@pytest.mark.parametrize("count, seed", [(40, 1), pytest.param(80, 2, marks=pytest.mark.slow)])
def test_mutated_onnx_files_give_classified_results(tmp_path, count, seed):
    source = conv_net_onnx(tmp_path / "conv_net.onnx")
    assert benchmark_outcome(source)["ok"] is True  # the unbroken model runs
    kinds = fuzz(source, ".onnx", count, seed, tmp_path)
    assert kinds.get(BAD_ARTIFACT, 0) > count // 4, kinds
    assert no_children_left()


@pytest.mark.parametrize("count, seed", [(30, 1), pytest.param(60, 2, marks=pytest.mark.slow)])
def test_mutated_tflite_files_give_classified_results(int8_tflite, tmp_path, count, seed):
    source = int8_tflite[0]
    kinds = fuzz(source, ".tflite", count, seed, tmp_path)
    assert kinds.get(BAD_ARTIFACT, 0) > count // 4, kinds
    assert no_children_left()
