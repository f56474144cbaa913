#!/usr/bin/env bash
# Writes docker/requirements-{probe,operator}.lock from docker/requirements-*.txt: every
# package the images install from PyPI, transitive ones included, pinned and with the
# sha256 of each of its files on the index (all platforms: amd64 and arm64 images alike),
# for `pip install --require-hashes` in the Dockerfile. Run it after changing a pin in
# docker/requirements-*.txt (tests/charts/test_docker.py checks that the locks follow
# them). Needs PyPI; pip-tools goes into a venv under ~/.cache/hulk, not the project's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
PIP_TOOLS_VERSION=7.6.2
tools="${HULK_CACHE:-$HOME/.cache/hulk}/pip-tools-$PIP_TOOLS_VERSION"
if [ ! -x "$tools/bin/pip-compile" ]; then
  python3.11 -m venv "$tools"
  "$tools/bin/pip" install --quiet "pip-tools==$PIP_TOOLS_VERSION"
fi
for image in probe operator; do
  # PIP_FIND_LINKS unset: a local wheel folder must not stand in for the index
  PIP_FIND_LINKS= "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe \
    --strip-extras --no-emit-index-url --no-emit-find-links \
    --output-file "docker/requirements-$image.lock" "docker/requirements-$image.txt"
  echo "wrote docker/requirements-$image.lock"
done
