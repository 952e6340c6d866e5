"""Every case of the benchmark by name (CASES, in the order runs report them) and the named groups
`--models` accepts (GROUPS)."""
from __future__ import annotations

from typing import Callable, Dict, List

from realbench.cases import audio, documents, faces, photos, pitch, text

CASES: Dict[str, Callable] = {
    "detector": faces.detector, "transformer": text.transformer, "vad": audio.vad, "ocr": documents.ocr,
    "classifier": documents.classifier, "orientation": documents.orientation,
    # issue 26 item 6
    "crepe-tiny": pitch.crepe_tiny, "crepe-full": pitch.crepe_full, "pesto": pitch.pesto, "speaker": audio.speaker,
    "pnet": faces.pnet, "rnet": faces.rnet, "onet": faces.onet, "text-map": documents.text_map,
    "layout": documents.layout, "notes": audio.notes,
    # issue 36 item 5: models nobody tuned edgeopt on, converted as a new user would (no output kinds given);
    # their PyTorch sources' own FP32 exports name the output "output", a name that says nothing of its kind,
    # as the names edgeopt's exporter invents (mean_1, linear) say nothing
    "swift-f0": pitch.swift_f0, "fcpe": pitch.fcpe, "dnsmos": audio.dnsmos, "centerface": faces.centerface,
    "mobilenet-v2": photos.mobilenet_v2, "reid": photos.reid,
}
GROUPS: Dict[str, List[str]] = {
    "all": list(CASES),
    "issue26": ["crepe-tiny", "crepe-full", "pesto", "speaker", "pnet", "rnet", "onet", "text-map", "layout", "notes"],
    "untuned": ["swift-f0", "fcpe", "dnsmos", "centerface", "mobilenet-v2", "reid"],
}


def selected(models: str) -> List[str]:
    """`--models`: case names and group names (GROUPS), comma-separated, in order, each once."""
    names: List[str] = []
    for item in filter(None, models.split(",")):
        if item not in CASES and item not in GROUPS:
            raise SystemExit(f"unknown model or group '{item}'; models: {', '.join(CASES)}; groups: {', '.join(GROUPS)}")
        names += [n for n in GROUPS.get(item, [item]) if n not in names]
    return names
