#!/usr/bin/env bash
# Builds (once) the Go tools the tests and checks use, cached under ~/.cache/hulk/bin keyed
# by version: helm, kubeconform, promtool and the Kubernetes JSON schemas (charts/tools.sh), and
# toxiproxy for the probe's fault-injection tests. Fast when cached.
set -euo pipefail
cd "$(dirname "$0")/.."
bash charts/tools.sh >/dev/null
python -c 'from hulk_probe.toxiproxy import ensure_binary; print("[tools] toxiproxy:", ensure_binary())'
