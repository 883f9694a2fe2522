"""Threads per test process: the usable cores shared among the pytest-xdist workers.

Two workers on two cores each running ONNX Runtime (and torch) with two threads would put four
spinning threads on two cores; with ``THREADS`` = cores // workers each worker keeps to its share.
A run without xdist (``-p no:xdist``, one process) gets every core; ``TD_TEST_THREADS=N`` sets it.
"""

from __future__ import annotations

import os

from typed_decisions.cpu import usable_cores

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = int(os.environ.get("TD_TEST_THREADS") or max(1, usable_cores() // WORKERS))
