"""Small nets the converter tests build models from (plain torch.nn, no downloads)."""
import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.features(x))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 4)
        self.b = nn.Linear(3, 4)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


def small_cnn():
    torch.manual_seed(0)
    return SmallCnn()


def two_inputs():
    torch.manual_seed(0)
    return TwoInputs()


def raises():
    raise RuntimeError("weights server unreachable")


def not_a_module():
    return {"weights": [1, 2, 3]}


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


class ResidualNet(nn.Module):
    """conv-bn-relu, a residual block (conv-bn-relu-conv-bn + identity, relu), pooling, linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.branch = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        x = self.stem(x)
        return self.head(torch.relu(x + self.branch(x)))


def residual_net():
    torch.manual_seed(0)
    return ResidualNet()


class TwoHeads(nn.Module):
    """Class scores and a regression output, returned as a dict."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.classes = nn.Linear(16, 5)
        self.box = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return {"scores": self.classes(h), "box": self.box(h)}


def two_heads():
    torch.manual_seed(0)
    return TwoHeads()


def regressor():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Unflatten(1, (1, 3)))


class TinyDetector(nn.Module):
    """A YOLOv8-style head: [N, 4 + C, anchors], pixel boxes and sigmoid class scores concatenated."""

    def __init__(self, classes: int = 3):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.boxes = nn.Conv2d(16, 4, 1)
        self.scores = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        features = self.backbone(x)
        boxes = torch.sigmoid(self.boxes(features)) * 640
        scores = torch.sigmoid(self.scores(features))
        return torch.cat([boxes, scores], 1).flatten(2)


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 48))

    def forward(self, x):
        return nn.functional.normalize(self.net(x), dim=-1)


class GruStep(nn.Module):
    """One step of a recurrent model: the state goes in and comes back out, to be fed again."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 16)
        self.head = nn.Linear(16, 1)

    def forward(self, x, state):
        state = self.cell(x, state)
        return torch.sigmoid(self.head(state)), state


def tiny_detector():
    torch.manual_seed(0)
    model = TinyDetector()
    with torch.no_grad():
        model.scores.bias.fill_(-1.0)  # a few confident anchors, most in the background
    return model


def embedder():
    torch.manual_seed(0)
    return Embedder()


def gru_step():
    torch.manual_seed(0)
    return GruStep()
