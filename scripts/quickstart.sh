#!/usr/bin/env bash
# The README's first command: set up, then run the whole product once on this machine
# (local broker, agent, collector; convert, deploy, benchmark, fleet table, HTML report).
# The setup leaves out what only the tests use and the product does not (Chromium, for the
# report's screenshot test: that test then skips and says why); `bash scripts/setup.sh` installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
EDGEOPT_SKIP_BROWSER="${EDGEOPT_SKIP_BROWSER:-1}" bash scripts/setup.sh
exec .venv/bin/edgeopt quickstart -o quickstart-out "$@"
