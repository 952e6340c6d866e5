"""This host's own roofline, measured: small onnxruntime kernels for peak throughput and bandwidth.

- FP32 peak: a 256x1024 @ 1024x1024 MatMul; INT8 peak: the same as MatMulInteger (uint8 x int8),
  the kernel onnxruntime runs INT8 artifacts' matrix products with;
- bandwidth: an Add of a 32 MiB tensor and a scalar (reads it once, writes it once);
- cache: the last-level cache's size from Linux sysfs, and its bandwidth by the same Add on a
  tensor that fits in an eighth of it (none where sysfs does not say);
- overhead: a chain of 200 Relu nodes on a 16-element tensor, per node; the fixed cost of a run:
  one such Relu, less one node's overhead; a convolution's or matrix product's own (its hand-off
  to the thread pool): a chain of 50 tiny 1-D convolutions (16 channels, 32 steps), per node, less
  its arithmetic at the FP32 peak;
- per kernel kind and precision (`kind_kernels`: dense, depthwise and pointwise convolution, a
  float convolution unfolded into the GEMM outside NCHWc, matrix product, elementwise, normalization, pooling, layout moves, quantize/dequantize; INT8 as
  onnxruntime runs QDQ artifacts): the throughput and bandwidth one typical node of that kind
  reaches, its run's fixed cost and one node's overhead taken off. The dense, pointwise, unfolded and
  matrix kernels are compute-bound: they measure throughput only, and their nodes move bytes at the
  machine's bandwidth.
Each is the best of several timed runs (what the hardware can reach, not what a noisy moment gave).
"""
from __future__ import annotations

import functools
import math
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

from edgeopt_agent.bench.spec import available_cpus
from edgeopt_agent.errors import require

from .kind_kernels import COMPUTE_KINDS, COMPUTE_ROLE_KINDS, kind_kernels
from .roofline import KindRoof, Machine, node_time, roof_key

_M, _K, _N = 256, 1024, 1024
_BANDWIDTH_ELEMENTS = 8 * 2**20  # float32: 32 MiB
_CHAIN = 200
_TINY = 50  # tiny convolutions in the dispatch chain
_TINY_SHAPE = (1, 16, 32)  # 16 channels, 32 steps; 3-tap kernels, 16 -> 16
KIND_PREFIX = "kind:"


def _session(model, threads: int):
    ort = require("onnxruntime", "convert")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])


def _best_s(call: Callable[[], object], repeats: int = 5, min_s: float = 0.03) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        runs, start = 0, time.perf_counter()
        while True:
            call()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_s:
                break
        best = min(best, elapsed / runs)
    return best


def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Size of the highest-level data or unified cache Linux reports, in bytes; 0 where it reports none."""
    best_level, best_size = 0, 0
    for index in sorted(Path(root).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
        try:
            size = int(text.rstrip("KMGkmg")) * scale
        except ValueError:
            continue
        if level > best_level:
            best_level, best_size = level, size
    return best_size


def _add(elements: int, threads: int) -> Callable[[], object]:
    onnx = require("onnx", "convert")
    helper, tp = onnx.helper, onnx.TensorProto
    add = _model([helper.make_node("Add", ["x", "one"], ["y"])], [helper.make_tensor_value_info("x", tp.FLOAT, [elements])],
                 [helper.make_tensor_value_info("y", tp.FLOAT, None)],
                 [onnx.numpy_helper.from_array(np.ones((1,), np.float32), "one")])
    return _run(_session(add, threads), {"x": np.ones(elements, np.float32)})


def _model(nodes, inputs, outputs, initializers=()):
    onnx = require("onnx", "convert")
    graph = onnx.helper.make_graph(nodes, "calibration", inputs, outputs, list(initializers))
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def _run(session, feeds) -> Callable[[], object]:
    return functools.partial(session.run, None, feeds)


def kernels(threads: int) -> Dict[str, Callable[[], object]]:
    """The calibration kernels, ready to call: "fp32", "int8", "dram", "cache" (where known), "overhead",
    "run", and "kind:PRECISION/KIND:N" for each kernel kind."""
    onnx = require("onnx", "convert")
    helper, tp = onnx.helper, onnx.TensorProto
    rng = np.random.default_rng(0)
    fp32 = _model([helper.make_node("MatMul", ["a", "b"], ["c"])],
                  [helper.make_tensor_value_info("a", tp.FLOAT, [_M, _K])], [helper.make_tensor_value_info("c", tp.FLOAT, None)],
                  [onnx.numpy_helper.from_array(rng.standard_normal((_K, _N)).astype(np.float32), "b")])
    int8 = _model([helper.make_node("MatMulInteger", ["a", "b"], ["c"])],
                  [helper.make_tensor_value_info("a", tp.UINT8, [_M, _K])], [helper.make_tensor_value_info("c", tp.INT32, None)],
                  [onnx.numpy_helper.from_array(rng.integers(-127, 127, (_K, _N)).astype(np.int8), "b")])
    chain = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(_CHAIN)]
    relus = _model(chain, [helper.make_tensor_value_info("t0", tp.FLOAT, [1, 16])],
                   [helper.make_tensor_value_info(f"t{_CHAIN}", tp.FLOAT, None)])
    calls = {
        "fp32": _run(_session(fp32, threads), {"a": rng.standard_normal((_M, _K)).astype(np.float32)}),
        "int8": _run(_session(int8, threads), {"a": rng.integers(0, 255, (_M, _K)).astype(np.uint8)}),
        "dram": _add(_BANDWIDTH_ELEMENTS, threads),
        "overhead": _run(_session(relus, threads), {"t0": np.ones((1, 16), np.float32)}),
        "run": _run(_session(_model(chain[:1], relus.graph.input, [helper.make_tensor_value_info("t1", tp.FLOAT, None)]),
                             threads), {"t0": np.ones((1, 16), np.float32)}),
    }
    tiny = [helper.make_node("Conv", [f"c{i}", f"w{i}"], [f"c{i + 1}"], pads=[1, 1]) for i in range(_TINY)]
    tiny_weights = [onnx.numpy_helper.from_array(0.1 * rng.standard_normal((16, 16, 3)).astype(np.float32), f"w{i}")
                    for i in range(_TINY)]
    convs = _model(tiny, [helper.make_tensor_value_info("c0", tp.FLOAT, list(_TINY_SHAPE))],
                   [helper.make_tensor_value_info(f"c{_TINY}", tp.FLOAT, None)], tiny_weights)
    calls["dispatch"] = _run(_session(convs, threads), {"c0": np.ones(_TINY_SHAPE, np.float32)})
    for kernel in kind_kernels():
        calls[KIND_PREFIX + kernel.name] = _run(_session(kernel.model, threads), kernel.feeds)
    if _cache_elements():
        calls["cache"] = _add(_cache_elements(), threads)
    return calls


def _cache_elements() -> int:
    return last_level_cache_bytes() // 8 // 4


def _kind_roofs(seconds: Dict[str, float], run_s: float, base: Machine) -> Dict[str, KindRoof]:
    """Each kind's roof: the best throughput and the best bandwidth its kernels reached, net of the run's
    fixed cost, the nodes' overhead and the time of the kernel's other nodes (at the roofs found so far)."""
    roofs: Dict[str, KindRoof] = {}
    for kernel in kind_kernels():
        name = KIND_PREFIX + kernel.name
        if name not in seconds or not kernel.nodes:
            continue
        so_far = replace(base, kinds=_with_peaks(roofs, base))
        others_s = sum(node_time(n, so_far).ms for n in kernel.others) / 1000.0
        dispatch_s = (kernel.nodes * (base.compute_overhead_us if kernel.kind in COMPUTE_ROLE_KINDS and base.compute_overhead_us
                                      else base.overhead_us) - base.overhead_us) * 1e-6  # run_s holds one node's
        net = max(seconds[name] - run_s - dispatch_s - others_s, 1e-7)
        key = roof_key(kernel.precision, kernel.kind)
        old = roofs.get(key)
        gops, gbps = kernel.ops / net / 1e9, kernel.bytes / net / 1e9
        if kernel.kind in COMPUTE_KINDS:  # its kernel is compute-bound: its bytes say nothing of the bandwidth
            gbps = 0.0
        if old is not None:
            gops, gbps = max(gops, old.gops), max(gbps, old.gbps)
        roofs[key] = KindRoof(gops, gbps, f"{old.kernel}; {kernel.what}" if old else kernel.what)
    return _with_peaks(roofs, base)


def _with_peaks(roofs: Dict[str, KindRoof], base: Machine) -> Dict[str, KindRoof]:
    """A kind whose kernels compute nothing (copies) times its nodes' operations at the machine's peak."""
    return {key: roof if roof.gops > 0 else replace(roof, gops=base.peak(key.split("/")[0])[0])
            for key, roof in roofs.items()}


def machine_from(seconds: Dict[str, float], threads: int) -> Machine:
    """This host's roofline from each kernel's time per call (seconds)."""
    ops = 2.0 * _M * _K * _N
    cache, cache_elements = last_level_cache_bytes(), _cache_elements()
    cache_gbps = 2 * cache_elements * 4 / seconds["cache"] / 1e9 if "cache" in seconds else 0.0
    overhead_s = seconds["overhead"] / _CHAIN
    run_s = seconds.get("run", overhead_s)
    base = Machine(
        "host", {"fp32": ops / seconds["fp32"] / 1e9, "int8": ops / seconds["int8"] / 1e9},
        2 * _BANDWIDTH_ELEMENTS * 4 / seconds["dram"] / 1e9, overhead_s * 1e6,
        f"measured on this {platform.machine()} host with onnxruntime, {threads} thread(s): "
        f"{_M}x{_K}x{_N} MatMul / MatMulInteger, a {_BANDWIDTH_ELEMENTS * 4 // 2**20} MiB Add, {_CHAIN} chained Relu"
        + (f", a {cache_elements * 4 // 1024} KiB Add in its {cache // 2**20} MiB last-level cache" if cache else ""),
        cache_bytes=float(cache) if "cache" in seconds else 0.0, cache_bandwidth_gbps=cache_gbps,
        run_overhead_us=max(run_s - overhead_s, 0.0) * 1e6,
    )
    if "dispatch" in seconds:
        tiny_ops = 2.0 * math.prod(_TINY_SHAPE) * 16 * 3
        per_node = (seconds["dispatch"] - base.run_overhead_us * 1e-6) / _TINY - tiny_ops / (base.peak_gops["fp32"] * 1e9)
        base = replace(base, compute_overhead_us=max(per_node, overhead_s) * 1e6,
                       source=base.source + f", {_TINY} chained tiny 1-D Conv")
    kinds = _kind_roofs(seconds, run_s, base)
    if not kinds:
        return base
    return replace(base, kinds=kinds, source=base.source + f", and small kernels of {len(kinds)} kernel kinds")


def measure_host(threads: Optional[int] = None) -> Machine:
    threads = threads or available_cpus()
    return machine_from({name: _best_s(call) for name, call in kernels(threads).items()}, threads)
