#!/usr/bin/env bash
# The README's first command: set up, then run the whole product once on this machine
# (local broker, agent, collector; convert, deploy, benchmark, fleet table, HTML report).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/edgeopt quickstart -o quickstart-out "$@"
