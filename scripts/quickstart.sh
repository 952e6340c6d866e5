#!/usr/bin/env bash
# The README's first command: set up, then run the main job on the bundled example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/edgeopt convert example:digits-cnn --device "${1:-rpi4}" -o quickstart-out
