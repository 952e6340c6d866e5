"""Image classifiers rebuilt without weights, as the published board measurements ran them.

Latency does not depend on the weights, only on the layers and their shapes, so each network is
defined here layer for layer (torchvision does not import beside the pinned torch). Where a
benchmark ran a variant that differs from torchvision's (ncnn's Caffe AlexNet with grouped
convolutions at 227x227, the Caffe ResNet-50 that strides in its first 1x1 convolution), the
variant is its own builder. `tests/scripts/test_arch_zoo.py` checks parameter counts against the
published ones.
"""
from __future__ import annotations

from functools import partial
from typing import List, Sequence

import torch
from torch import nn


def divisible(value: float, divisor: int = 8) -> int:
    """Channels rounded to a multiple of `divisor`, never below 90% of `value` (MobileNet's rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn(cin: int, cout: int, k: int, s: int = 1, g: int = 1, act: type = nn.ReLU, p: int = -1) -> nn.Sequential:
    layers: List[nn.Module] = [nn.Conv2d(cin, cout, k, s, k // 2 if p < 0 else p, groups=g, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def conv_relu(cin: int, cout: int, k: int, s: int = 1, p: int = 0, g: int = 1) -> nn.Sequential:
    """A plain convolution with bias and ReLU (Caffe-era networks have no batch norm)."""
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, p, groups=g), nn.ReLU())


class Classifier(nn.Module):
    """features -> global average pool -> linear classifier."""

    def __init__(self, features: nn.Module, width: int, classes: int = 1000, hidden: Sequence[int] = (),
                 hidden_act: type = nn.ReLU):
        super().__init__()
        self.features = features
        layers: List[nn.Module] = []
        for size in hidden:
            layers += [nn.Linear(width, size), hidden_act()]
            width = size
        layers.append(nn.Linear(width, classes))
        self.head = nn.Sequential(*layers)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- MobileNet V1 / V2 / V3 -------------------------------------------------------------------------


def mobilenet_v1(width: float = 1.0) -> nn.Module:
    c = lambda n: int(n * width)  # noqa: E731
    plan = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
        [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    layers: List[nn.Module] = [conv_bn(3, c(32), 3, 2)]
    for cin, cout, s in plan:
        layers += [conv_bn(c(cin), c(cin), 3, s, g=c(cin)), conv_bn(c(cin), c(cout), 1)]
    return Classifier(nn.Sequential(*layers), c(1024))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, s: int, expanded: int, act: type = nn.ReLU6,
                 se: int = 0, se_gate: type = nn.Hardsigmoid, se_act: type = nn.ReLU):
        super().__init__()
        layers: List[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=act))
        layers.append(conv_bn(expanded, expanded, k, s, g=expanded, act=act))
        if se:
            layers.append(SqueezeExcite(expanded, se, se_act, se_gate))
        layers.append(conv_bn(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = s == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int, act: type = nn.ReLU, gate: type = nn.Hardsigmoid):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(self.act(self.reduce(s))))


def mobilenet_v2(width: float = 1.0) -> nn.Module:
    plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    cin = divisible(32 * width)
    layers: List[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
    for t, c, n, s in plan:
        cout = divisible(c * width)
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, 3, s if i == 0 else 1, cin * t))
            cin = cout
    last = divisible(1280 * max(1.0, width))
    layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
    return Classifier(nn.Sequential(*layers), last)


# (kernel, expanded, out, squeeze-excite, hard-swish, stride)
_V3_LARGE = [(3, 16, 16, 0, 0, 1), (3, 64, 24, 0, 0, 2), (3, 72, 24, 0, 0, 1), (5, 72, 40, 1, 0, 2),
             (5, 120, 40, 1, 0, 1), (5, 120, 40, 1, 0, 1), (3, 240, 80, 0, 1, 2), (3, 200, 80, 0, 1, 1),
             (3, 184, 80, 0, 1, 1), (3, 184, 80, 0, 1, 1), (3, 480, 112, 1, 1, 1), (3, 672, 112, 1, 1, 1),
             (5, 672, 160, 1, 1, 2), (5, 960, 160, 1, 1, 1), (5, 960, 160, 1, 1, 1)]
_V3_SMALL = [(3, 16, 16, 1, 0, 2), (3, 72, 24, 0, 0, 2), (3, 88, 24, 0, 0, 1), (5, 96, 40, 1, 1, 2),
             (5, 240, 40, 1, 1, 1), (5, 240, 40, 1, 1, 1), (5, 120, 48, 1, 1, 1), (5, 144, 48, 1, 1, 1),
             (5, 288, 96, 1, 1, 2), (5, 576, 96, 1, 1, 1), (5, 576, 96, 1, 1, 1)]


def mobilenet_v3(large: bool = True, width: float = 1.0) -> nn.Module:
    plan = _V3_LARGE if large else _V3_SMALL
    cin = divisible(16 * width)
    layers: List[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.Hardswish)]
    for k, expanded, out, se, hs, s in plan:
        expanded, out = divisible(expanded * width), divisible(out * width)
        layers.append(InvertedResidual(cin, out, k, s, expanded, nn.Hardswish if hs else nn.ReLU,
                                       divisible(expanded / 4) if se else 0))
        cin = out
    last = 6 * cin
    layers.append(conv_bn(cin, last, 1, act=nn.Hardswish))
    return Classifier(nn.Sequential(*layers), last, hidden=(1280 if large else 1024,), hidden_act=nn.Hardswish)


# --- EfficientNet, MnasNet, RegNetY -------------------------------------------------------------


def efficientnet_b0() -> nn.Module:
    plan = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
            (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    cin = 32
    layers: List[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.SiLU)]
    for t, k, s, cout, n in plan:
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, k, s if i == 0 else 1, cin * t, nn.SiLU, max(1, cin // 4),
                                           se_gate=nn.Sigmoid, se_act=nn.SiLU))
            cin = cout
    layers.append(conv_bn(cin, 1280, 1, act=nn.SiLU))
    return Classifier(nn.Sequential(*layers), 1280)


def mnasnet(width: float = 1.0) -> nn.Module:
    """MnasNet-B1 (torchvision's mnasnet1_0): no squeeze-excite."""
    c = lambda n: divisible(n * width)  # noqa: E731
    layers: List[nn.Module] = [conv_bn(3, c(32), 3, 2), conv_bn(c(32), c(32), 3, g=c(32)),
                               conv_bn(c(32), c(16), 1, act=None)]
    cin = c(16)
    for cout, k, s, t, n in [(24, 3, 2, 3, 3), (40, 5, 2, 3, 3), (80, 5, 2, 6, 3), (96, 3, 1, 6, 2), (192, 5, 2, 6, 4),
                             (320, 3, 1, 6, 1)]:
        for i in range(n):
            layers.append(InvertedResidual(cin, c(cout), k, s if i == 0 else 1, cin * t, nn.ReLU))
            cin = c(cout)
    layers.append(conv_bn(cin, 1280, 1))
    return Classifier(nn.Sequential(*layers), 1280)


class RegNetYBlock(nn.Module):
    def __init__(self, cin: int, cout: int, s: int, group_width: int):
        super().__init__()
        self.a = conv_bn(cin, cout, 1)
        self.b = conv_bn(cout, cout, 3, s, g=cout // group_width)
        self.se = SqueezeExcite(cout, int(round(cin * 0.25)), nn.ReLU, nn.Sigmoid)
        self.c = conv_bn(cout, cout, 1, act=None)
        self.project = conv_bn(cin, cout, 1, s, act=None) if (cin != cout or s != 1) else None
        self.act = nn.ReLU()

    def forward(self, x):
        shortcut = x if self.project is None else self.project(x)
        return self.act(shortcut + self.c(self.se(self.b(self.a(x)))))


def regnety_400mf() -> nn.Module:
    layers: List[nn.Module] = [conv_bn(3, 32, 3, 2)]
    cin = 32
    for width, depth in [(48, 1), (104, 3), (208, 6), (440, 6)]:
        for i in range(depth):
            layers.append(RegNetYBlock(cin, width, 2 if i == 0 else 1, 8))
            cin = width
    return Classifier(nn.Sequential(*layers), cin)


# --- ShuffleNet V1 / V2 -------------------------------------------------------------------------


def channel_shuffle(x, groups: int):
    b, c, h, w = x.shape
    return x.reshape(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleV2Block(nn.Module):
    def __init__(self, cin: int, cout: int, s: int):
        super().__init__()
        half = cout // 2
        self.s = s
        if s > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, s, g=cin, act=None), conv_bn(cin, half, 1))
        branch_in = cin if s > 1 else half
        self.branch2 = nn.Sequential(conv_bn(branch_in, half, 1), conv_bn(half, half, 3, s, g=half, act=None),
                                     conv_bn(half, half, 1))

    def forward(self, x):
        if self.s == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), 1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), 1)
        return channel_shuffle(out, 2)


def shufflenet_v2(widths: Sequence[int] = (24, 116, 232, 464, 1024)) -> nn.Module:
    layers: List[nn.Module] = [conv_bn(3, widths[0], 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = widths[0]
    for cout, repeats in zip(widths[1:4], (4, 8, 4)):
        for i in range(repeats):
            layers.append(ShuffleV2Block(cin, cout, 2 if i == 0 else 1))
            cin = cout
    layers.append(conv_bn(cin, widths[4], 1))
    return Classifier(nn.Sequential(*layers), widths[4])


class ShuffleV1Unit(nn.Module):
    def __init__(self, cin: int, cout: int, s: int, groups: int, first_grouped: bool):
        super().__init__()
        self.s, self.groups = s, groups
        out = cout - cin if s > 1 else cout
        mid = out // 4
        self.reduce = conv_bn(cin, mid, 1, g=groups if first_grouped else 1)
        self.depthwise = conv_bn(mid, mid, 3, s, g=mid, act=None)
        self.expand = conv_bn(mid, out, 1, g=groups, act=None)
        self.act = nn.ReLU()

    def forward(self, x):
        y = self.expand(self.depthwise(channel_shuffle(self.reduce(x), self.groups)))
        if self.s > 1:
            return self.act(torch.cat((nn.functional.avg_pool2d(x, 3, 2, 1), y), 1))
        return self.act(x + y)


def shufflenet_v1(groups: int = 3) -> nn.Module:
    widths = {3: (240, 480, 960)}[groups]
    layers: List[nn.Module] = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 24
    for stage, (cout, repeats) in enumerate(zip(widths, (4, 8, 4))):
        for i in range(repeats):
            layers.append(ShuffleV1Unit(cin, cout, 2 if i == 0 else 1, groups, not (stage == 0 and i == 0)))
            cin = cout
    return Classifier(nn.Sequential(*layers), cin)


# --- SqueezeNet, AlexNet, VGG, GoogLeNet (Caffe-era, no batch norm) -------------------------------


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, e1: int, e3: int):
        super().__init__()
        self.squeeze = conv_relu(cin, squeeze, 1)
        self.e1 = conv_relu(squeeze, e1, 1)
        self.e3 = conv_relu(squeeze, e3, 3, p=1)

    def forward(self, x):
        s = self.squeeze(x)
        return torch.cat((self.e1(s), self.e3(s)), 1)


class ConvClassifier(nn.Module):
    """SqueezeNet's head: a 1x1 convolution to the classes, then the global average."""

    def __init__(self, features: nn.Module, width: int, classes: int = 1000):
        super().__init__()
        self.features = features
        self.classify = conv_relu(width, classes, 1)

    def forward(self, x):
        return torch.flatten(nn.functional.adaptive_avg_pool2d(self.classify(self.features(x)), 1), 1)


def squeezenet(version: str = "1_1") -> nn.Module:
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    if version == "1_0":
        layers = [conv_relu(3, 96, 7, 2), pool(), Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128),
                  pool(), Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
                  Fire(384, 64, 256, 256), pool(), Fire(512, 64, 256, 256)]
    else:
        layers = [conv_relu(3, 64, 3, 2), pool(), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
                  Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(), Fire(256, 48, 192, 192),
                  Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256)]
    return ConvClassifier(nn.Sequential(*layers), 512)


class FlatClassifier(nn.Module):
    """AlexNet's and VGG's head: flatten the last feature map into fully connected layers."""

    def __init__(self, features: nn.Module, flat: int, hidden: int = 4096, classes: int = 1000):
        super().__init__()
        self.features = features
        self.head = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, classes))

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def alexnet_caffe() -> nn.Module:
    """BVLC AlexNet as ncnn's benchmark runs it: 227x227, local response norms, two groups."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    features = nn.Sequential(conv_relu(3, 96, 11, 4), nn.LocalResponseNorm(5), pool(),
                             conv_relu(96, 256, 5, p=2, g=2), nn.LocalResponseNorm(5), pool(),
                             conv_relu(256, 384, 3, p=1), conv_relu(384, 384, 3, p=1, g=2),
                             conv_relu(384, 256, 3, p=1, g=2), pool())
    return FlatClassifier(features, 256 * 6 * 6)


class AdaptiveFlat(nn.Module):
    def __init__(self, features: nn.Module, size: int):
        super().__init__()
        self.features, self.size = features, size

    def forward(self, x):
        return nn.functional.adaptive_avg_pool2d(self.features(x), self.size)


def alexnet() -> nn.Module:
    """torchvision's AlexNet (one group, no local response norm), 224x224."""
    features = nn.Sequential(conv_relu(3, 64, 11, 4, 2), nn.MaxPool2d(3, 2), conv_relu(64, 192, 5, p=2),
                             nn.MaxPool2d(3, 2), conv_relu(192, 384, 3, p=1), conv_relu(384, 256, 3, p=1),
                             conv_relu(256, 256, 3, p=1), nn.MaxPool2d(3, 2))
    return FlatClassifier(AdaptiveFlat(features, 6), 256 * 6 * 6)


_VGG = {11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
        13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
        16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]}


def vgg(depth: int = 16) -> nn.Module:
    layers: List[nn.Module] = []
    cin = 3
    for item in _VGG[depth]:
        if item == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers.append(conv_relu(cin, item, 3, p=1))
            cin = item
    return FlatClassifier(nn.Sequential(*layers), 512 * 7 * 7)


class Inception(nn.Module):
    """GoogLeNet's block: BVLC's (plain convolutions, a 5x5 branch), or torchvision's (`conv` batch-normed, its
    "5x5" branch a 3x3 convolution: `wide` 3)."""

    def __init__(self, cin: int, b1: int, b3r: int, b3: int, b5r: int, b5: int, pool: int, conv=None, wide: int = 5):
        super().__init__()
        conv = conv or conv_relu
        self.b1 = conv(cin, b1, 1)
        self.b3 = nn.Sequential(conv(cin, b3r, 1), conv(b3r, b3, 3, p=1))
        self.b5 = nn.Sequential(conv(cin, b5r, 1), conv(b5r, b5, wide, p=wide // 2))
        self.pool = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv(cin, pool, 1))  # stride 1: ceil mode changes nothing

    def forward(self, x):
        return torch.cat((self.b1(x), self.b3(x), self.b5(x), self.pool(x)), 1)


def googlenet() -> nn.Module:
    """BVLC GoogLeNet (Inception v1 with 5x5 branches and local response norms), as ncnn's benchmark runs it."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    features = nn.Sequential(
        conv_relu(3, 64, 7, 2, 3), pool(), nn.LocalResponseNorm(5), conv_relu(64, 64, 1), conv_relu(64, 192, 3, p=1),
        nn.LocalResponseNorm(5), pool(),
        Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64), pool(),
        Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
        Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
        Inception(528, 256, 160, 320, 32, 128, 128), pool(),
        Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128))
    return Classifier(features, 1024)


def basic_conv(cin: int, cout: int, k, s: int = 1, p=0) -> nn.Sequential:
    """torchvision's BasicConv2d: convolution without bias, batch norm (eps 0.001), ReLU."""
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, p, bias=False), nn.BatchNorm2d(cout, eps=0.001), nn.ReLU())


def googlenet_tv() -> nn.Module:
    """torchvision's GoogLeNet (batch norm, no auxiliary classifiers at inference)."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    InceptionV1 = partial(Inception, conv=basic_conv, wide=3)  # noqa: N806
    features = nn.Sequential(
        basic_conv(3, 64, 7, 2, 3), pool(), basic_conv(64, 64, 1), basic_conv(64, 192, 3, p=1), pool(),
        InceptionV1(192, 64, 96, 128, 16, 32, 32), InceptionV1(256, 128, 128, 192, 32, 96, 64), pool(),
        InceptionV1(480, 192, 96, 208, 16, 48, 64), InceptionV1(512, 160, 112, 224, 24, 64, 64),
        InceptionV1(512, 128, 128, 256, 24, 64, 64), InceptionV1(512, 112, 144, 288, 32, 64, 64),
        InceptionV1(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(2, 2, ceil_mode=True),
        InceptionV1(832, 256, 160, 320, 32, 128, 128), InceptionV1(832, 384, 192, 384, 48, 128, 128))
    return Classifier(features, 1024)


class _Branches(nn.Module):
    """Parallel branches concatenated on channels (a branch given as a pair splits in two and both are kept)."""

    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(b if isinstance(b, nn.Module) else nn.ModuleList(b) for b in branches)

    def forward(self, x):
        outs = []
        for b in self.branches:
            if isinstance(b, nn.ModuleList):  # stem, then two heads on it
                y = b[0](x)
                outs += [b[1](y), b[2](y)]
            else:
                outs.append(b(x))
        return torch.cat(outs, 1)


def _avg_pool_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), basic_conv(cin, cout, 1))


def inception_a(cin: int, pool: int) -> nn.Module:
    return _Branches(basic_conv(cin, 64, 1), nn.Sequential(basic_conv(cin, 48, 1), basic_conv(48, 64, 5, p=2)),
                     nn.Sequential(basic_conv(cin, 64, 1), basic_conv(64, 96, 3, p=1), basic_conv(96, 96, 3, p=1)),
                     _avg_pool_conv(cin, pool))


def inception_b(cin: int) -> nn.Module:
    return _Branches(basic_conv(cin, 384, 3, 2),
                     nn.Sequential(basic_conv(cin, 64, 1), basic_conv(64, 96, 3, p=1), basic_conv(96, 96, 3, 2)),
                     nn.MaxPool2d(3, 2))


def inception_c(cin: int, c7: int) -> nn.Module:
    row, col = lambda a, b: basic_conv(a, b, (1, 7), p=(0, 3)), lambda a, b: basic_conv(a, b, (7, 1), p=(3, 0))  # noqa: E731
    return _Branches(basic_conv(cin, 192, 1), nn.Sequential(basic_conv(cin, c7, 1), row(c7, c7), col(c7, 192)),
                     nn.Sequential(basic_conv(cin, c7, 1), col(c7, c7), row(c7, c7), col(c7, c7), row(c7, 192)),
                     _avg_pool_conv(cin, 192))


def inception_d(cin: int) -> nn.Module:
    return _Branches(nn.Sequential(basic_conv(cin, 192, 1), basic_conv(192, 320, 3, 2)),
                     nn.Sequential(basic_conv(cin, 192, 1), basic_conv(192, 192, (1, 7), p=(0, 3)),
                                   basic_conv(192, 192, (7, 1), p=(3, 0)), basic_conv(192, 192, 3, 2)),
                     nn.MaxPool2d(3, 2))


def inception_e(cin: int) -> nn.Module:
    split = lambda a: (basic_conv(a, 384, (1, 3), p=(0, 1)), basic_conv(a, 384, (3, 1), p=(1, 0)))  # noqa: E731
    return _Branches(basic_conv(cin, 320, 1), (basic_conv(cin, 384, 1),) + split(384),
                     (nn.Sequential(basic_conv(cin, 448, 1), basic_conv(448, 384, 3, p=1)),) + split(384),
                     _avg_pool_conv(cin, 192))


class InceptionV3(Classifier):
    """torchvision's Inception V3 at 299x299; its auxiliary classifier (trained, not run at inference) is kept
    only so that the parameter count is torchvision's."""

    def __init__(self, classes: int = 1000):
        features = nn.Sequential(
            basic_conv(3, 32, 3, 2), basic_conv(32, 32, 3), basic_conv(32, 64, 3, p=1), nn.MaxPool2d(3, 2),
            basic_conv(64, 80, 1), basic_conv(80, 192, 3), nn.MaxPool2d(3, 2),
            inception_a(192, 32), inception_a(256, 64), inception_a(288, 64), inception_b(288),
            inception_c(768, 128), inception_c(768, 160), inception_c(768, 160), inception_c(768, 192),
            inception_d(768), inception_e(1280), inception_e(2048))
        super().__init__(features, 2048, classes)
        self.aux = nn.Sequential(basic_conv(768, 128, 1), basic_conv(128, 768, 5), nn.Flatten(), nn.Linear(768, classes))


# --- ResNet, DenseNet ----------------------------------------------------------------------------


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, s: int, caffe: bool = False):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, planes, 3, s), conv_bn(planes, planes, 3, act=None))
        self.down = conv_bn(cin, planes, 1, s, act=None) if (s != 1 or cin != planes) else None
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.body(x) + (x if self.down is None else self.down(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, s: int, caffe: bool = False, widen: int = 1):
        super().__init__()
        first, middle = (s, 1) if caffe else (1, s)  # Caffe ResNet strides in the first 1x1, torchvision in the 3x3
        mid = planes * widen  # Wide ResNet: the 3x3 convolution `widen` times as wide
        self.body = nn.Sequential(conv_bn(cin, mid, 1, first), conv_bn(mid, mid, 3, middle),
                                  conv_bn(mid, planes * 4, 1, act=None))
        self.down = conv_bn(cin, planes * 4, 1, s, act=None) if (s != 1 or cin != planes * 4) else None
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.body(x) + (x if self.down is None else self.down(x)))


_RESNET = {18: (Basic, (2, 2, 2, 2)), 34: (Basic, (3, 4, 6, 3)), 50: (Bottleneck, (3, 4, 6, 3)),
           101: (Bottleneck, (3, 4, 23, 3)), 152: (Bottleneck, (3, 8, 36, 3))}


def resnet(depth: int = 18, caffe: bool = False, widen: int = 1) -> nn.Module:
    """ResNet; `widen` 2: torchvision's Wide ResNet-50-2 (bottleneck 3x3 convolutions twice as wide)."""
    block, counts = _RESNET[depth]
    extra = {"widen": widen} if widen != 1 else {}
    layers: List[nn.Module] = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, count in enumerate(counts):
        planes = 64 * 2 ** stage
        for i in range(count):
            layers.append(block(cin, planes, 2 if (i == 0 and stage > 0) else 1, caffe, **extra))
            cin = planes * block.expansion
    return Classifier(nn.Sequential(*layers), cin)


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int = 4):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, bn_size * growth, 1, bias=False),
                                  nn.BatchNorm2d(bn_size * growth), nn.ReLU(),
                                  nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False))

    def forward(self, x):
        return torch.cat((x, self.body(x)), 1)


_DENSENET = {121: (32, (6, 12, 24, 16), 64), 169: (32, (6, 12, 32, 32), 64), 201: (32, (6, 12, 48, 32), 64),
             161: (48, (6, 12, 36, 24), 96)}


def densenet(depth: int = 121) -> nn.Module:
    growth, blocks, cin = _DENSENET[depth]
    layers: List[nn.Module] = [conv_bn(3, cin, 7, 2), nn.MaxPool2d(3, 2, 1)]
    for index, count in enumerate(blocks):
        for _ in range(count):
            layers.append(DenseLayer(cin, growth))
            cin += growth
        if index < len(blocks) - 1:
            layers += [nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cin // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
            cin //= 2
    layers += [nn.BatchNorm2d(cin), nn.ReLU()]
    return Classifier(nn.Sequential(*layers), cin)


# --- MobileNet-SSD (Caffe, chuanqi305) ---------------------------------------------------------------


class MobileNetSSD(nn.Module):
    """MobileNet V1 SSD at 300x300, 21 VOC classes, 1x1 box and class heads; prior boxes and the
    detection output are post-processing, not run here."""

    def __init__(self, classes: int = 21):
        super().__init__()
        plan = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
            [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
        layers: List[nn.Module] = [conv_bn(3, 32, 3, 2)]
        for cin, cout, s in plan:
            layers.append(nn.Sequential(conv_bn(cin, cin, 3, s, g=cin), conv_bn(cin, cout, 1)))
        self.upto11 = nn.Sequential(*layers[:12])
        self.upto13 = nn.Sequential(*layers[12:])
        extras: List[nn.Module] = []
        cin = 1024
        for mid, cout in [(256, 512), (128, 256), (128, 256), (64, 128)]:
            extras.append(nn.Sequential(conv_bn(cin, mid, 1), conv_bn(mid, cout, 3, 2)))
            cin = cout
        self.extras = nn.ModuleList(extras)
        sources = [(512, 3), (1024, 6), (512, 6), (256, 6), (256, 6), (128, 6)]
        self.loc = nn.ModuleList(nn.Conv2d(c, a * 4, 1) for c, a in sources)
        self.conf = nn.ModuleList(nn.Conv2d(c, a * classes, 1) for c, a in sources)
        self.classes = classes

    def forward(self, x):
        features = [self.upto11(x)]
        features.append(self.upto13(features[0]))
        for extra in self.extras:
            features.append(extra(features[-1]))
        loc = torch.cat([head(f).permute(0, 2, 3, 1).flatten(1) for head, f in zip(self.loc, features)], 1)
        conf = torch.cat([head(f).permute(0, 2, 3, 1).flatten(1) for head, f in zip(self.conf, features)], 1)
        return loc, torch.softmax(conf.reshape(x.shape[0], -1, self.classes), -1)

