#!/usr/bin/env bash
# Create .venv and install every distribution of this repository editable (runtime with its server, fit,
# client, eval and test extras, the export step, the integrations). The test extra pins the System One
# suites tests/test_conformance.py runs: jevcompat==0.1.1 and jevbench==0.1.0. Idempotent: skipped when nothing changed.
# torch is installed first and pinned (torch==2.13.0, a CPU wheel pip finds on these machines), so
# no requirement can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.td-setup
want=$(cat pyproject.toml export/pyproject.toml integrations/*/pyproject.toml scripts/setup.sh 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip
pip install -q torch==2.13.0
args=(-e ".[server,client,eval,fit,test]" -e ./export)
for d in integrations/*/; do [ -f "$d/pyproject.toml" ] && args+=(-e "${d%/}[test]"); done
pip install -q "${args[@]}"
.venv/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
# The System One suites the conformance test runs (pinned in the test extra): jevcompat 0.1.1, jevbench 0.1.0
.venv/bin/python -c "from importlib.metadata import version as v; got = (v('jevcompat'), v('jevbench')); \
assert got == ('0.1.1', '0.1.0'), got"
echo "$want" > "$stamp"
