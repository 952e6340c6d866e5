"""Object detectors rebuilt without weights, as the published board measurements ran them.

Ultralytics YOLOv8 / YOLO11 / YOLO26 (their model YAMLs' layers and width/depth scales), YOLOX
(Megvii's CSPDarknet with the Focus stem: four strided slices of the image concatenated, the
pattern pnnx leaves to ncnn as Tensor.slice), YOLOv4-tiny and EfficientDet-Lite0..4 (google/automl's
hparams: EfficientNet-Lite backbone, BiFPN with sum fusion, separable-convolution heads). Each exports the raw head outputs
with the box decoding an exported model carries (grid offsets, strides, DFL where the family has
one); non-maximum suppression is post-processing and not part of any published latency here.

YOLO26 is written as YOLO11's layers with a one-to-one head and no distribution focal loss
(reg_max 1): its published parameter count and FLOPs (2.4 M / 5.4 G for n) are checked against
this definition in tests/scripts/test_arch_zoo.py, as are the other families'.
"""
from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import torch
from torch import nn

from arch_classifiers import InvertedResidual


class Conv(nn.Module):
    """Convolution, batch norm, activation (Ultralytics' and YOLOX's building block)."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1, g: int = 1, act: bool = True,
                 activation: type = nn.SiLU):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = activation() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


def DWConv(cin: int, cout: int, k: int = 3, s: int = 1, act: bool = True) -> Conv:  # noqa: N802 (Ultralytics' name)
    return Conv(cin, cout, k, s, g=math.gcd(cin, cout), act=act)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, shortcut: bool = True, e: float = 0.5, k: Tuple[int, int] = (3, 3)):
        super().__init__()
        hidden = int(cout * e)
        self.cv1, self.cv2 = Conv(cin, hidden, k[0]), Conv(hidden, cout, k[1])
        self.add = shortcut and cin == cout

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = False, e: float = 0.5):
        super().__init__()
        self.c = int(cout * e)
        self.cv1 = Conv(cin, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, cout, 1)
        self.m = nn.ModuleList(self.block(shortcut) for _ in range(n))

    def block(self, shortcut: bool) -> nn.Module:
        return Bottleneck(self.c, self.c, shortcut, e=1.0)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class C3(nn.Module):
    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True, e: float = 0.5, k: int = 3):
        super().__init__()
        hidden = int(cout * e)
        self.cv1, self.cv2 = Conv(cin, hidden, 1), Conv(cin, hidden, 1)
        self.cv3 = Conv(2 * hidden, cout, 1)
        self.m = nn.Sequential(*(Bottleneck(hidden, hidden, shortcut, e=1.0, k=(k, k)) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C3k2(C2f):
    def __init__(self, cin: int, cout: int, n: int = 1, c3k: bool = False, e: float = 0.5, shortcut: bool = True):
        self.c3k = c3k
        super().__init__(cin, cout, n, shortcut, e)

    def block(self, shortcut: bool) -> nn.Module:
        return C3(self.c, self.c, 2, shortcut) if self.c3k else Bottleneck(self.c, self.c, shortcut)


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int, k: int = 5):
        super().__init__()
        hidden = cin // 2
        self.cv1, self.cv2 = Conv(cin, hidden, 1), Conv(hidden * 4, cout, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, attn_ratio: float = 0.5):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim ** -0.5
        self.qkv = Conv(dim, dim + self.key_dim * heads * 2, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, 1, g=dim, act=False)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(x).view(b, self.heads, self.key_dim * 2 + self.head_dim, h * w).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
        y = (v @ attn.transpose(-2, -1)).view(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(y)


class PSABlock(nn.Module):
    def __init__(self, c: int, heads: int):
        super().__init__()
        self.attn = Attention(c, heads)
        self.ffn = nn.Sequential(Conv(c, c * 2, 1), Conv(c * 2, c, 1, act=False))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.ffn(x)


class C2PSA(nn.Module):
    def __init__(self, cin: int, cout: int, n: int = 1):
        super().__init__()
        self.c = cin // 2
        self.cv1, self.cv2 = Conv(cin, 2 * self.c, 1), Conv(2 * self.c, cin, 1)
        self.m = nn.Sequential(*(PSABlock(self.c, max(1, self.c // 64)) for _ in range(n)))

    def forward(self, x):
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


def _grid(shapes: Sequence[Tuple[int, int]], strides: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Anchor centres and strides of every cell of every level (constants of an exported model)."""
    points, steps = [], []
    for (h, w), s in zip(shapes, strides):
        ys, xs = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        points.append(torch.stack((xs, ys), -1).reshape(-1, 2))
        steps.append(torch.full((h * w, 1), float(s)))
    return torch.cat(points).T.unsqueeze(0), torch.cat(steps).T.unsqueeze(0)


class Detect(nn.Module):
    """Ultralytics' anchor-free head: a box branch (4 x reg_max logits, decoded by DFL where reg_max > 1)
    and a class branch per level; YOLO11/26's class branch uses depthwise convolutions."""

    def __init__(self, channels: Sequence[int], classes: int = 80, reg_max: int = 16, light_cls: bool = False,
                 strides: Sequence[int] = (8, 16, 32)):
        super().__init__()
        self.reg_max, self.classes, self.strides = reg_max, classes, tuple(strides)
        c2 = max(16, channels[0] // 4, reg_max * 4)
        c3 = max(channels[0], min(classes, 100))
        self.box = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
                                 for c in channels)
        if light_cls:
            self.cls = nn.ModuleList(nn.Sequential(nn.Sequential(DWConv(c, c, 3), Conv(c, c3, 1)),
                                                   nn.Sequential(DWConv(c3, c3, 3), Conv(c3, c3, 1)),
                                                   nn.Conv2d(c3, classes, 1)) for c in channels)
        else:
            self.cls = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, classes, 1))
                                     for c in channels)
        if reg_max > 1:
            self.dfl = nn.Conv2d(reg_max, 1, 1, bias=False)
            self.dfl.weight.data[:] = torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1)

    def forward(self, features: List[torch.Tensor]):
        b = features[0].shape[0]
        boxes = torch.cat([m(f).view(b, 4 * self.reg_max, -1) for m, f in zip(self.box, features)], 2)
        scores = torch.cat([m(f).view(b, self.classes, -1) for m, f in zip(self.cls, features)], 2)
        anchors, strides = _grid([tuple(f.shape[2:]) for f in features], self.strides)
        if self.reg_max > 1:
            a = boxes.shape[2]
            boxes = self.dfl(boxes.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = boxes.chunk(2, 1)
        x1y1, x2y2 = anchors - lt, anchors + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((xywh, scores.sigmoid()), 1)


# depth, width, max channels (the model YAMLs' scales)
_V8_SCALES = {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768), "l": (1.00, 1.00, 512),
              "x": (1.00, 1.25, 512)}
_11_SCALES = {"n": (0.50, 0.25, 1024), "s": (0.50, 0.50, 1024), "m": (0.50, 1.00, 512), "l": (1.00, 1.00, 512),
              "x": (1.00, 1.50, 512)}


class Ultralytics(nn.Module):
    """YOLOv8 (C2f) or YOLO11 / YOLO26 (C3k2 + C2PSA) backbone and PAN neck with the Detect head."""

    def __init__(self, family: str, scale: str, classes: int = 80):
        super().__init__()
        v8 = family == "yolov8"
        depth, width, top = (_V8_SCALES if v8 else _11_SCALES)[scale]
        ch = lambda c: int(math.ceil(min(c, top) * width / 8) * 8)  # noqa: E731
        n = lambda k: max(round(k * depth), 1) if k > 1 else k  # noqa: E731
        c3k = scale in "mlx"
        if v8:
            block = lambda cin, cout, k, heavy=False, shortcut=True: C2f(cin, cout, n(k), shortcut)  # noqa: E731
        else:
            def block(cin, cout, k, heavy=False, shortcut=True, e=0.5):
                return C3k2(cin, cout, n(k), heavy or c3k, e, shortcut)
        p1, p2, p3, p4, p5 = ch(64), ch(128), ch(256), ch(512), ch(1024)
        self.stem = nn.Sequential(Conv(3, p1, 3, 2), Conv(p1, p2, 3, 2))
        if v8:
            self.b2 = block(p2, p2, 3)
            self.b3 = nn.Sequential(Conv(p2, p3, 3, 2), block(p3, p3, 6))
            self.b4 = nn.Sequential(Conv(p3, p4, 3, 2), block(p4, p4, 6))
            self.b5 = nn.Sequential(Conv(p4, p5, 3, 2), block(p5, p5, 3), SPPF(p5, p5))
        else:
            self.b2 = C3k2(p2, p3, n(2), c3k, 0.25)
            self.b3 = nn.Sequential(Conv(p3, p3, 3, 2), C3k2(p3, p4, n(2), c3k, 0.25))
            self.b4 = nn.Sequential(Conv(p4, p4, 3, 2), C3k2(p4, p4, n(2), True))
            self.b5 = nn.Sequential(Conv(p4, p5, 3, 2), C3k2(p5, p5, n(2), True), SPPF(p5, p5), C2PSA(p5, p5, n(2)))
        p3_out = p4 if not v8 else p3  # YOLO11's second stage ends wider than its stride-8 convolution
        shortcut = not v8
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h13 = block(p5 + p4, p4, 3 if v8 else 2, shortcut=shortcut)
        self.h16 = block(p4 + p3_out, p3, 3 if v8 else 2, shortcut=shortcut)
        self.d17 = Conv(p3, p3, 3, 2)
        self.h19 = block(p3 + p4, p4, 3 if v8 else 2, shortcut=shortcut)
        self.d20 = Conv(p4, p4, 3, 2)
        self.h22 = block(p4 + p5, p5, 3 if v8 else 2, heavy=True, shortcut=shortcut)
        reg_max = 1 if family == "yolo26" else 16
        self.detect = Detect((p3, p4, p5), classes, reg_max, light_cls=not v8)

    def forward(self, x):
        x2 = self.b2(self.stem(x))
        x3 = self.b3(x2)
        x4 = self.b4(x3)
        x5 = self.b5(x4)
        h13 = self.h13(torch.cat((self.up(x5), x4), 1))
        h16 = self.h16(torch.cat((self.up(h13), x3), 1))
        h19 = self.h19(torch.cat((self.d17(h16), h13), 1))
        h22 = self.h22(torch.cat((self.d20(h19), x5), 1))
        return self.detect([h16, h19, h22])


# --- YOLOX ------------------------------------------------------------------------------------------


class Focus(nn.Module):
    """Space to depth by four strided slices (x[..., ::2, ::2] and its three neighbours), then a convolution."""

    def __init__(self, cin: int, cout: int, k: int = 3):
        super().__init__()
        self.conv = Conv(cin * 4, cout, k)

    def forward(self, x):
        return self.conv(torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1))


class XBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, shortcut: bool, depthwise: bool):
        super().__init__()
        self.conv1 = Conv(cin, cout, 1)
        self.conv2 = (lambda a, b: nn.Sequential(Conv(a, a, 3, g=a), Conv(a, b, 1)) if depthwise else Conv(a, b, 3))(
            cout, cout)
        self.add = shortcut and cin == cout

    def forward(self, x):
        y = self.conv2(self.conv1(x))
        return x + y if self.add else y


class CSPLayer(nn.Module):
    def __init__(self, cin: int, cout: int, n: int, shortcut: bool, depthwise: bool):
        super().__init__()
        hidden = int(cout * 0.5)
        self.conv1, self.conv2 = Conv(cin, hidden, 1), Conv(cin, hidden, 1)
        self.conv3 = Conv(2 * hidden, cout, 1)
        self.m = nn.Sequential(*(XBottleneck(hidden, hidden, shortcut, depthwise) for _ in range(n)))

    def forward(self, x):
        return self.conv3(torch.cat((self.m(self.conv1(x)), self.conv2(x)), 1))


class SPPBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        hidden = cin // 2
        self.conv1, self.conv2 = Conv(cin, hidden, 1), Conv(hidden * 4, cout, 1)
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))

    def forward(self, x):
        x = self.conv1(x)
        return self.conv2(torch.cat([x] + [p(x) for p in self.pools], 1))


_YOLOX_SCALES = {"nano": (0.33, 0.25, True), "tiny": (0.33, 0.375, False), "s": (0.33, 0.50, False),
                 "m": (0.67, 0.75, False), "l": (1.0, 1.0, False), "x": (1.33, 1.25, False)}


class YOLOX(nn.Module):
    def __init__(self, scale: str, classes: int = 80):
        super().__init__()
        depth, width, dw = _YOLOX_SCALES[scale]
        c = lambda k: int(k * width)  # noqa: E731
        n = lambda k: max(round(k * depth), 1)  # noqa: E731
        down = lambda a, b: nn.Sequential(Conv(a, a, 3, 2, g=a), Conv(a, b, 1)) if dw else Conv(a, b, 3, 2)  # noqa: E731
        conv3 = lambda a, b: nn.Sequential(Conv(a, a, 3, g=a), Conv(a, b, 1)) if dw else Conv(a, b, 3)  # noqa: E731
        self.stem = Focus(3, c(64))
        self.dark2 = nn.Sequential(down(c(64), c(128)), CSPLayer(c(128), c(128), n(3), True, dw))
        self.dark3 = nn.Sequential(down(c(128), c(256)), CSPLayer(c(256), c(256), n(9), True, dw))
        self.dark4 = nn.Sequential(down(c(256), c(512)), CSPLayer(c(512), c(512), n(9), True, dw))
        self.dark5 = nn.Sequential(down(c(512), c(1024)), SPPBottleneck(c(1024), c(1024)),
                                   CSPLayer(c(1024), c(1024), n(3), False, dw))
        self.lateral0 = Conv(c(1024), c(512), 1)
        self.c3_p4 = CSPLayer(c(1024), c(512), n(3), False, dw)
        self.reduce1 = Conv(c(512), c(256), 1)
        self.c3_p3 = CSPLayer(c(512), c(256), n(3), False, dw)
        self.bu2 = down(c(256), c(256))
        self.c3_n3 = CSPLayer(c(512), c(512), n(3), False, dw)
        self.bu1 = down(c(512), c(512))
        self.c3_n4 = CSPLayer(c(1024), c(1024), n(3), False, dw)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        head = c(256)
        self.stems = nn.ModuleList(Conv(k, head, 1) for k in (c(256), c(512), c(1024)))
        self.cls_convs = nn.ModuleList(nn.Sequential(conv3(head, head), conv3(head, head)) for _ in range(3))
        self.reg_convs = nn.ModuleList(nn.Sequential(conv3(head, head), conv3(head, head)) for _ in range(3))
        self.cls_preds = nn.ModuleList(nn.Conv2d(head, classes, 1) for _ in range(3))
        self.reg_preds = nn.ModuleList(nn.Conv2d(head, 4, 1) for _ in range(3))
        self.obj_preds = nn.ModuleList(nn.Conv2d(head, 1, 1) for _ in range(3))

    def forward(self, x):
        x3 = self.dark3(self.dark2(self.stem(x)))
        x4 = self.dark4(x3)
        x5 = self.dark5(x4)
        f0 = self.lateral0(x5)
        f1 = self.reduce1(self.c3_p4(torch.cat((self.up(f0), x4), 1)))
        p3 = self.c3_p3(torch.cat((self.up(f1), x3), 1))
        p4 = self.c3_n3(torch.cat((self.bu2(p3), f1), 1))
        p5 = self.c3_n4(torch.cat((self.bu1(p4), f0), 1))
        outputs = []
        for i, f in enumerate((p3, p4, p5)):
            f = self.stems[i](f)
            reg = self.reg_convs[i](f)
            out = torch.cat((self.reg_preds[i](reg), self.obj_preds[i](reg).sigmoid(),
                             self.cls_preds[i](self.cls_convs[i](f)).sigmoid()), 1)
            outputs.append(out.flatten(2))
        out = torch.cat(outputs, 2)
        anchors, strides = _grid([tuple(f.shape[2:]) for f in (p3, p4, p5)], (8, 16, 32))
        xy = (out[:, :2] + anchors - 0.5) * strides
        wh = out[:, 2:4].exp() * strides
        return torch.cat((xy, wh, out[:, 4:]), 1)


# --- YOLOv4-tiny (Darknet) ------------------------------------------------------------------------


class YOLOv4Tiny(nn.Module):
    def __init__(self, classes: int = 80):
        super().__init__()
        conv = lambda a, b, k=3, s=1: Conv(a, b, k, s, activation=lambda: nn.LeakyReLU(0.1))  # noqa: E731
        self.stem = nn.Sequential(conv(3, 32, 3, 2), conv(32, 64, 3, 2))
        self.blocks = nn.ModuleList()
        for c in (64, 128, 256):
            self.blocks.append(nn.ModuleList([conv(c, c), conv(c // 2, c // 2), conv(c // 2, c // 2), conv(c, c, 1)]))
        self.pool = nn.MaxPool2d(2, 2)
        self.conv5 = conv(512, 512)
        self.neck = conv(512, 256, 1)
        self.head13 = nn.Sequential(conv(256, 512), nn.Conv2d(512, 3 * (5 + classes), 1))
        self.lateral = conv(256, 128, 1)
        self.head26 = nn.Sequential(conv(384, 256), nn.Conv2d(256, 3 * (5 + classes), 1))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        x = self.stem(x)
        routes = []
        for first, a, b, merge in self.blocks:
            x = first(x)
            half = a(x.chunk(2, 1)[1])
            y = merge(torch.cat((b(half), half), 1))
            routes.append(y)
            x = self.pool(torch.cat((x, y), 1))
        neck = self.neck(self.conv5(x))
        return self.head13(neck), self.head26(torch.cat((self.up(self.lateral(neck)), routes[-1]), 1))


# --- EfficientDet-Lite (google/automl efficientdet, hparams_config.efficientdet_lite_param_dict) -----------


# EfficientNet-Lite's blocks (repeats, kernel, stride, expand ratio, in, out), without squeeze-excite, ReLU6
_EFFICIENTNET_LITE_BLOCKS = ((1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
                             (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320))
# backbone (width, depth), BiFPN filters, BiFPN cells, box/class conv repeats
_EFFICIENTDET_LITE = {"0": ((1.0, 1.0), 64, 3, 3), "1": ((1.0, 1.1), 88, 4, 3), "2": ((1.1, 1.2), 112, 5, 3),
                      "3": ((1.2, 1.4), 160, 6, 4), "3x": ((1.2, 1.4), 200, 6, 4), "4": ((1.4, 1.8), 224, 7, 4)}


def _round_filters(filters: int, width: float) -> int:
    scaled = filters * width
    rounded = max(8, int(scaled + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * scaled else rounded


class SeparableConv(nn.Module):
    """Keras' SeparableConv2D (depthwise 3x3, then pointwise with bias) and a batch norm, as BiFPN and the heads use it."""

    def __init__(self, cin: int, cout: int, bn: bool = True):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, 1, 1, groups=cin, bias=False)
        self.pointwise = nn.Conv2d(cin, cout, 1)
        self.bn = nn.BatchNorm2d(cout) if bn else nn.Identity()

    def forward(self, x):
        return self.bn(self.pointwise(self.depthwise(x)))


class Resample(nn.Module):
    """automl's ResampleFeatureMap: a 1x1 convolution and batch norm where the channels differ, then max-pool
    (kernel 3, stride 2, SAME) down or nearest-neighbour resize up to the target level's size."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.project = nn.Sequential(nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout)) if cin != cout else nn.Identity()
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x, size: Tuple[int, int]):
        x = self.project(x)
        if x.shape[-1] > size[-1]:
            return self.pool(x)
        if x.shape[-1] < size[-1]:
            return nn.functional.interpolate(x, size=size, mode="nearest")
        return x


# automl's BiFPN nodes: (level, offsets into [P3..P7, nodes made so far])
_BIFPN_NODES = ((6, (3, 4)), (5, (2, 5)), (4, (1, 6)), (3, (0, 7)), (4, (1, 7, 8)), (5, (2, 6, 9)), (6, (3, 5, 10)),
                (7, (4, 11)))


class BiFPNCell(nn.Module):
    """One BiFPN cell with EfficientDet-Lite's plain sum fusion: each node resamples its inputs, adds them,
    then ReLU6 and a separable convolution with batch norm."""

    def __init__(self, channels: Sequence[int], filters: int):
        super().__init__()
        widths = list(channels)
        self.resamples = nn.ModuleList()
        for _, offsets in _BIFPN_NODES:
            self.resamples.append(nn.ModuleList(Resample(widths[i], filters) for i in offsets))
            widths.append(filters)
        self.convs = nn.ModuleList(SeparableConv(filters, filters) for _ in _BIFPN_NODES)
        self.act = nn.ReLU6()

    def forward(self, feats: List[torch.Tensor]) -> List[torch.Tensor]:
        feats = list(feats)
        levels = [3, 4, 5, 6, 7]
        for (level, offsets), resamples, conv in zip(_BIFPN_NODES, self.resamples, self.convs):
            size = tuple(feats[levels.index(level)].shape[-2:])
            fused = sum(r(feats[i], size) for i, r in zip(offsets, resamples))
            feats.append(conv(self.act(fused)))
            levels.append(level)
        return feats[-5:]  # the last nodes are P3'' .. P7'' in order


class EfficientDetHead(nn.Module):
    """automl's ClassNet / BoxNet: separable convolutions shared across levels (batch norms per level), ReLU6,
    then a separable prediction convolution."""

    def __init__(self, filters: int, repeats: int, outputs: int):
        super().__init__()
        self.convs = nn.ModuleList(SeparableConv(filters, filters, bn=False) for _ in range(repeats))
        self.bns = nn.ModuleList(nn.ModuleList(nn.BatchNorm2d(filters) for _ in range(5)) for _ in range(repeats))
        self.predict = SeparableConv(filters, outputs, bn=False)
        self.act = nn.ReLU6()

    def forward(self, feats: List[torch.Tensor]) -> torch.Tensor:
        outs = []
        for level, x in enumerate(feats):
            for conv, bns in zip(self.convs, self.bns):
                x = self.act(bns[level](conv(x)))
            outs.append(self.predict(x).flatten(2))
        return torch.cat(outs, 2)


class EfficientDetLite(nn.Module):
    """EfficientDet-Lite0..4 and Lite3x: EfficientNet-Lite backbone (stem and last stage unscaled), P6/P7 by
    1x1 convolution and max-pooling, BiFPN cells, class (90 classes) and box heads over 9 anchors per cell.
    The TFLite models' detection post-processing (box decoding, NMS) is a custom op outside this graph."""

    def __init__(self, version: str, classes: int = 90, anchors: int = 9):
        super().__init__()
        (width, depth), filters, cells, repeats = _EFFICIENTDET_LITE[version]
        stages, cin = [], 32
        self.stem = Conv(3, 32, 3, 2, activation=nn.ReLU6)
        for i, (n, k, s, e, _, cout) in enumerate(_EFFICIENTNET_LITE_BLOCKS):
            cout = _round_filters(cout, width)
            n = n if i in (0, len(_EFFICIENTNET_LITE_BLOCKS) - 1) else int(math.ceil(n * depth))
            blocks = []
            for j in range(n):
                blocks.append(InvertedResidual(cin, cout, k, s if j == 0 else 1, cin * e))  # ReLU6, no squeeze-excite
                cin = cout
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.ModuleList(stages)
        c3, c4, c5 = (_round_filters(c, width) for c in (40, 112, 320))
        self.p6 = Resample(c5, filters)
        self.p7 = Resample(filters, filters)
        self.cells = nn.ModuleList(BiFPNCell((c3, c4, c5, filters, filters) if i == 0 else (filters,) * 5, filters)
                                   for i in range(cells))
        self.class_net = EfficientDetHead(filters, repeats, classes * anchors)
        self.box_net = EfficientDetHead(filters, repeats, 4 * anchors)

    def forward(self, x):
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        p3, p4, p5 = outs[2], outs[4], outs[6]
        half = lambda t: ((t.shape[-2] + 1) // 2, (t.shape[-1] + 1) // 2)  # noqa: E731
        p6 = self.p6(p5, half(p5))
        feats = [p3, p4, p5, p6, self.p7(p6, half(p6))]
        for cell in self.cells:
            feats = cell(feats)
        return self.class_net(feats).sigmoid(), self.box_net(feats)
