#!/usr/bin/env bash
# Create .venv and install every distribution of this repository editable (runtime with its server, fit,
# client, eval and test extras, the export step, the integrations) at the versions of the lock,
# requirements/lock-py<XY>-linux-x86_64.txt (scripts/lock.sh regenerates it), so a new release on the
# index cannot change what a fresh clone installs. Idempotent: skipped when nothing changed.
#   PYTHON=python3.11   the interpreter (Python 3.11 or newer, with a lock of its own)
#   VENV=.venv          where to install
#   TD_LOCK=none        resolve afresh from the pyproject ranges (what scripts/lock.sh does)
# torch is installed first and pinned (torch==2.13.0, a CPU wheel pip finds on these machines), so
# no requirement can pull a multi-GB CUDA build. The test extra pins the System One suites
# tests/test_conformance.py runs: jevcompat==0.1.1 and jevbench==0.1.0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup.sh: typed_decisions needs Python 3.11 or newer; $PY is $("$PY" -V 2>&1)" >&2; exit 2; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
python=$VENV/bin/python
# Another author's distribution `typed-decisions` installs the same import package and console
# script as ours (`typed-decisions-runtime`); in one environment the two overwrite each other.
if clash=$("$python" -c 'from importlib.metadata import version as v; print(v("typed-decisions"))' 2>/dev/null); then
  echo "setup.sh: $VENV has the distribution 'typed-decisions' $clash installed, another project that" >&2
  echo "  also installs the import package 'typed_decisions' and the 'typed-decisions' command." >&2
  echo "  This repository is 'typed-decisions-runtime' (+ -export, -langchain, -dspy, -ray); the two" >&2
  echo "  cannot share an environment: '$python -m pip uninstall typed-decisions', then run this again." >&2
  exit 2
fi
lock=${TD_LOCK:-requirements/lock-py$("$python" -c 'import sys; print("%d%d" % sys.version_info[:2])')-linux-x86_64.txt}
constraints=()
if [ "$lock" != none ]; then
  [ -f "$lock" ] || { echo "setup.sh: no lock $lock for this Python; make one with PYTHON=$PY bash scripts/lock.sh" >&2; exit 2; }
  constraints=(-c "$lock")
fi
stamp=$VENV/.td-setup
want=$(cat pyproject.toml export/pyproject.toml integrations/*/pyproject.toml scripts/setup.sh \
       "${constraints[@]:1}" 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
pip() { "$python" -m pip "$@"; }
if [ "$lock" = none ]; then pip install -q --upgrade pip; else pip install -q "${constraints[@]}" pip; fi
pip install -q "${constraints[@]}" torch==2.13.0
args=(-e ".[server,client,eval,fit,test]" -e ./export)
for d in integrations/*/; do [ -f "$d/pyproject.toml" ] && args+=(-e "${d%/}[test]"); done
pip install -q "${constraints[@]}" "${args[@]}"
"$python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
# The System One suites the conformance test runs (pinned in the test extra): jevcompat 0.1.1, jevbench 0.1.0
"$python" -c "from importlib.metadata import version as v; got = (v('jevcompat'), v('jevbench')); \
assert got == ('0.1.1', '0.1.0'), got"
if [ "$lock" != none ]; then
  "$python" scripts/lockfile.py check-env "$lock" || {
    echo "setup.sh: $VENV differs from $lock (above); a fresh VENV installs it exactly" >&2; exit 1; }
fi
echo "$want" > "$stamp"
