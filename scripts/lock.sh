#!/usr/bin/env bash
# Regenerate the lock of the README's two commands: install every distribution of this repository
# into a fresh virtual environment from the pyproject ranges alone (scripts/setup.sh with TD_LOCK=none),
# then record every installed version, transitive dependencies included, for this Python on Linux x86-64.
#   PYTHON=python3.11 bash scripts/lock.sh   →  requirements/lock-py311-linux-x86_64.txt
# Commit the new lock with the pyproject change that needed it; tests/test_lock.py checks that the
# lock satisfies every range.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
VENV=$tmp/venv TD_LOCK=none PYTHON="$PY" bash scripts/setup.sh
ver=$("$tmp/venv/bin/python" -c 'import sys; print("%d%d" % sys.version_info[:2])')
out=requirements/lock-py$ver-linux-x86_64.txt
{
  echo "# The lock of scripts/setup.sh for Python ${ver:0:1}.${ver:1} on Linux x86-64: every distribution that"
  echo "# installing this repository resolved to on $(date -u +%Y-%m-%d), transitive dependencies included."
  echo "# Made by scripts/lock.sh; do not edit by hand. The distributions keep their ranges (pyproject.toml)."
  "$tmp/venv/bin/python" -m pip freeze --all --exclude-editable \
    | grep -v -i -E '^typed[-_]decisions[-_](runtime|export|langchain|dspy|ray)==' \
    | sed -E 's/^([^=]+)==([^+]+)\+.*/\1==\2/' | LC_ALL=C sort -f
} > "$out"
"$tmp/venv/bin/python" scripts/lockfile.py check-ranges "$out"
echo "wrote $out ($(grep -c '==' "$out") pins)"
