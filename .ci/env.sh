#!/usr/bin/env bash
# Creates (once) and activates the project's Python environment, cached outside the clone
# under ~/.cache/hulk/venv-<hash of requirements/dev.txt>. Source it: `. .ci/env.sh`.
# Installing torch (the CUDA build from PyPI, several GB) happens only on a cold cache.
set -euo pipefail
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_cache=${HULK_CACHE:-$HOME/.cache/hulk}
_hash=$(cat "$_root/requirements/dev.txt" | sha256sum | cut -c1-12)
_venv="$_cache/venv-py$(python3 -c 'import sys;print(f"{sys.version_info[0]}{sys.version_info[1]}")')-$_hash"
# One clone at a time creates the venv or re-points its editable install: a lock on the
# cache (before, two clones' first runs at once each ran pip into the same new venv, and
# one's `rm -rf` of an unfinished venv pulled it from under the other's install).
mkdir -p "$_cache"
exec {_hulk_lock}>"$_cache/venv.lock"
if ! flock -n "$_hulk_lock"; then
  echo "[env] another clone is setting up $_venv; waiting for it" >&2
  flock "$_hulk_lock"
fi
if [ ! -f "$_venv/.complete" ]; then
  echo "[env] creating $_venv (cold: downloads torch, takes minutes)" >&2
  rm -rf "$_venv"
  # each step checked here: set -e does not hold where this file is sourced in a list
  # (`source .ci/env.sh && ...`), and a failed or killed pip was marked complete
  if python3 -m venv "$_venv" && "$_venv/bin/pip" install -q --upgrade pip &&
    PIP_CACHE_DIR="$_cache/pip" "$_venv/bin/pip" install --progress-bar off \
      -r "$_root/requirements/dev.txt" >&2; then
    touch "$_venv/.complete"
  else
    echo "[env] setting up $_venv failed (pip's message above); source .ci/env.sh again" >&2
    exec {_hulk_lock}>&-
    set +euo pipefail
    return 1 2>/dev/null || exit 1
  fi
fi
# The editable install points at one checkout; the venv is shared by every clone (CI's,
# a second working copy), so it is made again whenever another checkout last took it
# (before, a marker per checkout kept it pointing at whichever clone came last: a trial).
_marker="$_venv/.editable-root"
if [ "$(cat "$_marker" 2>/dev/null)" != "$_root" ] || [ "$_root/pyproject.toml" -nt "$_marker" ]; then
  "$_venv/bin/pip" install -q --no-deps --no-build-isolation -e "$_root" >&2 2>/dev/null || "$_venv/bin/pip" install -q --no-deps -e "$_root" >&2
  echo "$_root" > "$_marker"
fi
exec {_hulk_lock}>&-
unset _hulk_lock
# The checkout's packages come first on the path whatever the editable install recorded
# (it maps packages found at install time; new packages would otherwise be missed).
export PYTHONPATH="$_root${PYTHONPATH:+:$PYTHONPATH}"
export VIRTUAL_ENV="$_venv"
export PATH="$_venv/bin:$PATH"
export HULK_CACHE="$_cache"
set +euo pipefail
