"""benchmarks/bench.py runs end to end on the tiny model (1 trial, W1) and ends with one JSON line.

No timing is asserted: only that every peer ran (or says why not) and the ratios line parses.
Slow (a few minutes on 2 cores): opt in with ``TYPED_DECISIONS_RUN_SLOW=1`` (the root conftest's
``--run-slow`` is not loaded for benchmarks/).

    TYPED_DECISIONS_RUN_SLOW=1 pytest benchmarks/test_bench.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent / "bench.py"


@pytest.mark.slow
def test_bench_runs_on_tiny(tmp_path, request):
    if not (request.config.getoption("--run-slow", default=False) or os.environ.get("TYPED_DECISIONS_RUN_SLOW")):
        pytest.skip("slow: runs the benchmark on the tiny model; opt in with --run-slow or TYPED_DECISIONS_RUN_SLOW=1")
    out = tmp_path / "tiny.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--model", "tiny", "--trials", "1", "--workloads", "W1",
                           "--modes", "names", "--profile", "int8", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ratios = json.loads(proc.stdout.strip().splitlines()[-1])
    res = json.loads(out.read_text())
    w1 = res["results"]["W1"]
    for system in ("ours_fp32_names_cache-off", "ours_int8_names_cache-warm", "reference", "free_text"):
        assert w1[system]["trials"] == 1, system
    assert w1["reference"]["max_abs_dp_vs_ours_fp32"] < 1e-3  # the reference is also the oracle
    assert "llama_cpp" in res["skipped"] or "llama_cpp" in w1
    assert ratios["model"] == res["model"] and "W1/reference/ours_fp32" in ratios
    assert res["ort_profile"]["int8"]["op_types_by_time"]
