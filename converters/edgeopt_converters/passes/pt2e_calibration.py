"""PT2E calibration, shared between the formats that quantize the same traced graph.

TFLite INT8 (litert-torch's quantizer) and ExecuTorch INT8 (XNNPACK's) both trace the source with
torch.export at the same example and put the same observers (symmetric INT8, per-channel weights,
histogram observers on activations) on the same nodes. The second to calibrate takes the first one's
observer statistics instead of running every calibration sample through the model again: on a
MobileNetV2 with 256 samples each calibration took 66-80 s on a busy 2-core host. Statistics move
only where every observer matches one of the first graph's by the node it observes, its type and its
settings; otherwise the samples run as usual.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

SETTINGS = ("bins", "dtype", "quant_min", "quant_max", "qscheme", "ch_axis", "eps", "upsample_rate")


def _observers(prepared) -> List[Tuple[str, Any]]:
    """(a key naming the observed node, the observer module) for each observer call in graph order."""
    found, seen = [], {}
    for node in prepared.graph.nodes:
        if node.op != "call_module" or "activation_post_process" not in str(node.target):
            continue
        observed = str(node.args[0]) if node.args else ""
        seen[observed] = seen.get(observed, 0) + 1
        found.append((f"{observed}#{seen[observed]}", getattr(prepared, node.target)))
    return found


def _signature(observers: List[Tuple[str, Any]]) -> str:
    return "|".join(f"{key}:{type(module).__name__}:" + ",".join(str(getattr(module, s, None)) for s in SETTINGS)
                    for key, module in observers)


def calibrate_prepared(torch, prepared, feeds: Iterable[Tuple[List[np.ndarray], int]],
                       on_batch: Optional[Callable[[int], None]] = None,
                       shared: Optional[Dict[str, Dict[str, Any]]] = None, samples: int = 0) -> str:
    """Run `feeds` through the observers of `prepared`, or load the statistics `shared` holds for the same
    observers (`samples`: how many the progress counts then). Returns how it was calibrated."""
    observers = _observers(prepared)
    signature = _signature(observers)
    if shared is not None and signature in shared:
        states = shared[signature]
        for key, module in observers:
            module.load_state_dict(states[key])
        if on_batch and samples:
            on_batch(samples)
        return "observer statistics shared with an earlier calibration of the same graph"
    with torch.no_grad():
        for arrays, real in feeds:
            prepared(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
            if on_batch:
                on_batch(real)
    if shared is not None:
        shared[signature] = {key: {k: v.clone() for k, v in module.state_dict().items()} for key, module in observers}
    return "calibrated"
