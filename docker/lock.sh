#!/usr/bin/env bash
# Writes docker/requirements-{probe,operator,build}.lock from docker/requirements-*.txt: every
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
# Another index in pip.conf or the environment must not stand in for PyPI (its files would
# be hashed and the lock would not say so), nor a local wheel folder.
export PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL=https://pypi.org/simple PIP_EXTRA_INDEX_URL=
export PIP_FIND_LINKS=
compile() {  # OUTPUT INPUT...: within requirements/dev.txt's pins (the tests' versions)
  local out=$1
  shift
  "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --no-emit-index-url --no-emit-find-links --constraint requirements/dev.txt \
    --output-file "$out" "$@"
  echo "wrote $out"
}
# The locks are resolved for the Python of the machine running this, which must be the
# images' (python:3.11): after changing the Dockerfile's PYTHON_IMAGE, lock again with it.
compile docker/requirements-probe.lock docker/requirements-probe.txt
compile docker/requirements-operator.lock docker/requirements-operator.txt \
  docker/requirements-torch.txt
compile docker/requirements-build.lock docker/requirements-build.txt
