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


class StatefulVad(nn.Module):
    """Like a voice-activity model: audio [B, L] (L a multiple of 16), a state [2, B, 8] whose
    axis 0 is not the batch, and the sample rate as a Python int."""

    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(16 + 8, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x, state, sr: int):
        frames = x.reshape(x.shape[0], -1, 16).mean(dim=1)
        h = torch.tanh(self.cell(torch.cat([frames, state[0]], dim=1)))
        new_state = torch.stack([h, state[1] * 0.5 + h * 0.5])
        scale = 1.0 if sr == 16000 else 0.5
        return torch.sigmoid(self.head(h)) * scale, new_state


class StatefulVadTensorRate(StatefulVad):
    """The same with the sample rate as a scalar int64 tensor, as ONNX exports carry it."""

    def forward(self, x, state, sr):
        frames = x.reshape(x.shape[0], -1, 16).mean(dim=1)
        h = torch.tanh(self.cell(torch.cat([frames, state[0]], dim=1)))
        new_state = torch.stack([h, state[1] * 0.5 + h * 0.5])
        scale = torch.where(sr == 16000, 1.0, 0.5)
        return torch.sigmoid(self.head(h)) * scale, new_state


def stateful_vad():
    torch.manual_seed(0)
    return StatefulVad()


class MixedInputs(nn.Module):
    """Three inputs of three dtypes: token ids (int64), a mask (int32), features (float32)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 8)
        self.proj = nn.Linear(4, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids, mask, features):
        tokens = self.embed(ids) * mask.unsqueeze(-1).to(torch.float32)
        pooled = tokens.sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1).to(torch.float32)
        return self.head(torch.relu(pooled + self.proj(features)))


def mixed_inputs():
    torch.manual_seed(0)
    return MixedInputs()


class TokenEncoder(nn.Module):
    """A sentence-embedding shape: ids and mask [B, seq] with seq dynamic, mean-pooled."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        hidden = torch.relu(self.proj(self.embed(input_ids))) * mask
        return hidden.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def token_encoder():
    torch.manual_seed(0)
    return TokenEncoder()


class DataDependentBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def data_dependent_branch():
    return DataDependentBranch()


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


class Recurrent(nn.Module):
    """A small LSTM tagger: [1, steps, 8] -> [1, steps, 4]."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 64, batch_first=True)
        self.head = nn.Linear(64, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def lstm():
    torch.manual_seed(0)
    return Recurrent()
