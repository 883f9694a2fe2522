#!/usr/bin/env bash
# Install what the tests need (idempotent) and run them on both cores: pytest-xdist with 2 workers,
# one test file per worker at a time (tests/conftest.py). Extra arguments go to pytest (`-n 0`: one
# process; TD_TEST_WORKERS=N: N workers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n "${TD_TEST_WORKERS:-2}" "$@"
