"""Small convolutions on this host: what one node costs when onnxruntime unfolds it into its float GEMM.

    .venv/bin/python scripts/bench_small_convs.py [--threads 2]

Chains of 20 convolutions (3 taps, C -> C channels) at a few output positions, written as 1-D
convolutions (which onnxruntime runs outside its NCHWc layout: unfolded, im2col, into MLAS's SGEMM,
which packs the unfolded input in 16-column panels and computes whole panels) and as 2-D ones of
height 1 (which it converts to NCHWc), each at ORT_ENABLE_ALL and at ORT_ENABLE_BASIC (no NCHWc). All
variants are timed in interleaved rounds (host_timing), and the per-node time is the chain's p50
divided by its length. If the panels decide, an unfolded convolution costs the same from 2 to 16
positions and steps up at 17; at 1 position it is a matrix-vector product. The roofline (`edgeopt
analyze`) charges such a node its padded work (node_kinds.GEMM_CONV); docs/BENCHMARKS.md, section
"Small convolutions", records the runs.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np

CHAIN = 20


def chain(dims: int, channels: int, positions: int):
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, name = [], [], "x"
    taps = (3,) if dims == 1 else (1, 3)
    for i in range(CHAIN):
        weights.append(numpy_helper.from_array((0.05 * rng.standard_normal((channels, channels, *taps))).astype(np.float32),
                                               f"w{i}"))
        nodes.append(helper.make_node("Conv", [name, f"w{i}"], [f"y{i}"], pads=[1, 1] if dims == 1 else [0, 1, 0, 1]))
        name = f"y{i}"
    shape = [1, channels, positions] if dims == 1 else [1, channels, 1, positions]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), shape


def session(model: bytes, level: str, threads: int):
    import onnxruntime as ort

    from edgeopt_converters.cost.host_timing import ORT_SIDE_BY_SIDE

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    for key, value in ORT_SIDE_BY_SIDE.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--positions", type=int, nargs="*", default=[1, 4, 16, 17, 256])
    parser.add_argument("--channels", type=int, nargs="*", default=[32, 128])
    args = parser.parse_args(argv)

    from hostinfo import cpu_model, int8_flags
    from edgeopt_converters.cost.host_timing import time_interleaved

    runs, rows = {}, []
    for positions in args.positions:
        for channels in args.channels:
            for dims in (1, 2):
                model, shape = chain(dims, channels, positions)
                feed = {"x": np.random.default_rng(1).random(shape, dtype=np.float32)}
                for level in ("ORT_ENABLE_ALL", "ORT_ENABLE_BASIC"):
                    key = f"{dims}-D {channels}->{channels} at {positions} positions, {level}"
                    runs[key] = (lambda s, f: (lambda: s.run(None, f)))(session(model, level, args.threads), feed)
                    rows.append((key, channels * channels * 3 * 4))
    timed = time_interleaved(runs, min_rounds=7, max_rounds=15, max_seconds=120.0)
    print(f"Host: {platform.machine()}, {cpu_model()}, {os.cpu_count()} CPUs; {int8_flags()}; "
          f"{args.threads} threads; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| chain of 20 convolutions (3 taps) | filter KiB | us per node (p50 / 20) |")
    print("|---|---|---|")
    for key, filter_bytes in rows:
        print(f"| {key} | {filter_bytes / 1024:.0f} | {timed[key].p50_ms * 1000 / CHAIN:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
