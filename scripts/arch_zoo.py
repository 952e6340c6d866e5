"""The architectures of the published board measurements (device_profiles/published/), by the names the
measurements use, each exported to ONNX as `edgeopt convert` exports a PyTorch model.

    from arch_zoo import ZOO, export
    path = export("yolo11n", (1, 3, 640, 640), Path("/tmp/zoo"))

`params` is the published parameter count each definition is checked against (tests/scripts/test_arch_zoo.py):
all parameters, or (`weights_only`) the convolution and fully connected weights that an ncnn benchmark
.param file records per layer (its batch norms are folded into biases); `gflops` the published GFLOPs
where the model's authors give them (multiply-accumulates counted twice).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import arch_classifiers as c
import arch_detectors as d


@dataclass(frozen=True)
class Arch:
    build: Callable
    params: float  # published parameter count, in millions
    where: str  # where the published count comes from
    gflops: Optional[float] = None  # published GFLOPs at `flops_input`, where given
    flops_input: Tuple[int, ...] = ()
    weights_only: bool = False  # `params` counts convolution and linear weights only


_TV = "torchvision model documentation (parameters)"
_TIMM = "timm model card (parameters)"
_UL = "Ultralytics model tables (parameters, FLOPs at 640)"
_YX = "YOLOX README model table (parameters, GFLOPs)"
_NCNN = "ncnn benchmark/models/{}.param (weight_data_size of every Convolution and InnerProduct layer)"

ZOO: Dict[str, Arch] = {
    # classifiers
    "alexnet": Arch(c.alexnet, 61.10, _TV),
    "alexnet_caffe": Arch(c.alexnet_caffe, 60.9547, _NCNN.format("alexnet"), weights_only=True),
    "densenet121": Arch(lambda: c.densenet(121), 7.98, _TV),
    "densenet161": Arch(lambda: c.densenet(161), 28.68, _TV),
    "densenet169": Arch(lambda: c.densenet(169), 14.15, _TV),
    "densenet201": Arch(lambda: c.densenet(201), 20.01, _TV),
    "efficientnet_b0": Arch(c.efficientnet_b0, 5.29, _TV),
    "googlenet": Arch(c.googlenet_tv, 6.62, _TV),
    "googlenet_caffe": Arch(c.googlenet, 6.9903, _NCNN.format("googlenet"), weights_only=True),
    "inception_v3": Arch(c.InceptionV3, 27.16, _TV),
    "mnasnet1_0": Arch(c.mnasnet, 4.38, _TV),
    "mobilenet_v1": Arch(c.mobilenet_v1, 4.2091, _NCNN.format("mobilenet"), weights_only=True),
    "mobilenet_v2": Arch(c.mobilenet_v2, 3.50, _TV),
    "mobilenet_v2_050": Arch(lambda: c.mobilenet_v2(0.5), 1.97, _TIMM),
    "mobilenet_v3_large": Arch(c.mobilenet_v3, 5.48, _TV),
    "mobilenet_v3_small_050": Arch(lambda: c.mobilenet_v3(False, 0.5), 1.59, _TIMM),
    "regnety_400mf": Arch(c.regnety_400mf, 4.34, _TV),
    "resnet18": Arch(lambda: c.resnet(18), 11.69, _TV),
    "resnet34": Arch(lambda: c.resnet(34), 21.80, _TV),
    "resnet50": Arch(lambda: c.resnet(50), 25.56, _TV),
    "resnet50_caffe": Arch(lambda: c.resnet(50, caffe=True), 25.56, "Caffe ResNet-50 (same weights as torchvision's)"),
    "resnet101": Arch(lambda: c.resnet(101), 44.55, _TV),
    "resnet152": Arch(lambda: c.resnet(152), 60.19, _TV),
    "shufflenet_v1_g3": Arch(c.shufflenet_v1, 1.79, _NCNN.format("shufflenet"), weights_only=True),
    "shufflenet_v2_x1_0": Arch(c.shufflenet_v2, 2.28, _TV),
    "squeezenet1_0": Arch(lambda: c.squeezenet("1_0"), 1.25, _TV),
    "squeezenet1_1": Arch(lambda: c.squeezenet("1_1"), 1.24, _TV),
    "vgg11": Arch(lambda: c.vgg(11), 132.86, _TV),
    "vgg13": Arch(lambda: c.vgg(13), 133.05, _TV),
    "vgg16": Arch(lambda: c.vgg(16), 138.36, _TV),
    "wide_resnet50_2": Arch(lambda: c.resnet(50, widen=2), 68.88, _TV),
    # detectors
    "mobilenet_ssd": Arch(c.MobileNetSSD, 5.7699, _NCNN.format("mobilenet_ssd"), weights_only=True),
    "yolov4_tiny": Arch(d.YOLOv4Tiny, 6.0499, _NCNN.format("yolov4-tiny"), weights_only=True),
}

# Ultralytics' and YOLOX's scales: published parameters (M) and GFLOPs (at 640x640; YOLOX nano and tiny at 416x416)
_ULTRALYTICS = {"yolov8": {"n": (3.2, 8.7), "s": (11.2, 28.6)},
                "yolo11": {"n": (2.6, 6.5), "s": (9.4, 21.5), "m": (20.1, 68.0), "l": (25.3, 86.9), "x": (56.9, 194.9)},
                "yolo26": {"n": (2.4, 5.4), "s": (9.5, 20.7), "m": (20.4, 68.2), "l": (24.8, 86.4), "x": (55.7, 193.9)}}
_EFFDET = "google/automl efficientdet README, EfficientDet-lite table (parameters)"
_EFFICIENTDET_LITE = {"0": 3.2, "1": 4.2, "2": 5.3, "3": 8.4, "3x": 9.3, "4": 15.1}
_YOLOX = {"nano": (0.91, 1.08, 416), "tiny": (5.06, 6.45, 416), "s": (9.0, 26.8, 640), "m": (25.3, 73.8, 640),
          "l": (54.2, 155.6, 640), "x": (99.1, 281.9, 640)}
ZOO.update({f"{family}{scale}": Arch(partial(d.Ultralytics, family, scale), params, _UL, gflops, (1, 3, 640, 640))
            for family, scales in _ULTRALYTICS.items() for scale, (params, gflops) in scales.items()})
ZOO.update({f"efficientdet_lite{v}": Arch(partial(d.EfficientDetLite, v), params, _EFFDET)
            for v, params in _EFFICIENTDET_LITE.items()})
ZOO.update({f"yolox_{scale}": Arch(partial(d.YOLOX, scale), params, _YX, gflops, (1, 3, size, size))
            for scale, (params, gflops, size) in _YOLOX.items()})


def build(name: str):
    """The named architecture, in eval mode, with its (random) weights."""
    import torch

    if name not in ZOO:
        raise KeyError(f"no architecture '{name}' in arch_zoo; known: {', '.join(sorted(ZOO))}")
    torch.manual_seed(0)
    return ZOO[name].build().eval()


def parameters(name: str) -> float:
    """Parameter count of the definition, in millions, counted as its published figure is (`weights_only`)."""
    only_weights = ZOO[name].weights_only
    return sum(p.numel() for p in build(name).parameters() if p.dim() > 1 or not only_weights) / 1e6


def export(name: str, shape: Tuple[int, ...], folder: Path) -> Path:
    """The architecture at an input shape, written to ONNX the way `edgeopt convert` writes a PyTorch
    model (passes.export_onnx.write_onnx, fixed shapes); cached by name and shape."""
    import torch

    from edgeopt_converters.passes.export_onnx import OnnxExportOptions, write_onnx

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{'x'.join(str(s) for s in shape)}.onnx"
    if not path.is_file():
        module = build(name)
        partial = path.with_suffix(".partial.onnx")
        with torch.no_grad():
            write_onnx(torch, module, (torch.zeros(shape),), ["input"], partial, {}, OnnxExportOptions().opset,
                       use_dynamo=True)
        partial.replace(path)
    return path
