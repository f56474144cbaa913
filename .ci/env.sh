#!/usr/bin/env bash
# Creates (once) and activates the project's Python environment, cached outside the clone
# under ~/.cache/hulk/venv-<hash of requirements/dev.txt>. Source it: `. .ci/env.sh`.
# Installing torch (the CUDA build from PyPI, several GB) happens only on a cold cache.
# No `set -e` here: it does not hold where this file is sourced in a list (`source
# .ci/env.sh && ...`, or .ci/run's stage, inside an `if`: a failed or killed pip was
# marked complete), and an interrupted source left an interactive shell in it; each step
# is checked instead.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_cache=${HULK_CACHE:-$HOME/.cache/hulk}
_hash=$(sha256sum < "$_root/requirements/dev.txt" | cut -c1-12)
_venv="$_cache/venv-py$(python3 -c 'import sys;print(f"{sys.version_info[0]}{sys.version_info[1]}")')-$_hash"

_hulk_env_setup() {
  # Creates the venv if it is not complete, and points its editable install at this
  # checkout: the venv is shared by every clone (CI's, a second working copy), so the
  # install is made again whenever another checkout last took it (before, a marker per
  # checkout kept it pointing at whichever clone came last: a trial).
  if [ ! -f "$_venv/.complete" ]; then
    echo "[env] creating $_venv (cold: downloads torch, takes minutes)" >&2
    rm -rf "$_venv"
    python3 -m venv "$_venv" && "$_venv/bin/pip" install -q --upgrade pip &&
      PIP_CACHE_DIR="$_cache/pip" "$_venv/bin/pip" install --progress-bar off \
        -r "$_root/requirements/dev.txt" >&2 || return 1
    touch "$_venv/.complete"
  fi
  local marker="$_venv/.editable-root"
  if [ "$(cat "$marker" 2>/dev/null)" != "$_root" ] || [ "$_root/pyproject.toml" -nt "$marker" ]; then
    { "$_venv/bin/pip" install -q --no-deps --no-build-isolation -e "$_root" 2>/dev/null ||
      "$_venv/bin/pip" install -q --no-deps -e "$_root"; } >&2 || return 1
    echo "$_root" > "$marker"
  fi
}

# One clone at a time sets up the venv: a lock on the cache, held by a subshell, so that
# an interrupted set-up lets it go (before, two clones' first runs at once each ran pip
# into the same new venv, and one's `rm -rf` of an unfinished venv pulled it from under
# the other's install).
mkdir -p "$_cache"
if ! (
  exec 9>"$_cache/venv.lock"
  if ! flock -n 9; then
    echo "[env] another clone is setting up $_venv; waiting for it" >&2
    flock 9
  fi
  _hulk_env_setup
); then
  echo "[env] setting up $_venv failed (pip's message above); source .ci/env.sh again" >&2
  unset -f _hulk_env_setup
  return 1 2>/dev/null || exit 1
fi
unset -f _hulk_env_setup
# The checkout's packages come first on the path whatever the editable install recorded
# (it maps packages found at install time; new packages would otherwise be missed).
export PYTHONPATH="$_root${PYTHONPATH:+:$PYTHONPATH}"
export VIRTUAL_ENV="$_venv"
export PATH="$_venv/bin:$PATH"
export HULK_CACHE="$_cache"
