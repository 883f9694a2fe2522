"""benchmarks/bench.py runs end to end on the tiny model and ends with one JSON line.

No timing is asserted. ``test_bench_runs_on_tiny`` (1 trial, W1): every peer ran (or says why
not) and the ratios line parses; slow (a few minutes on 2 cores): opt in with
``TYPED_DECISIONS_RUN_SLOW=1`` (the root conftest's ``--run-slow`` is not loaded for benchmarks/).
``test_w5_http_answers_equal_sequential`` (W5 only, 3 clients × 1 request, ~1 min on 2 loaded
cores) runs by default: both servers answered every request, each answer equals the in-process
sequential one, and the batched server did batch.

    pytest benchmarks/test_bench.py                                   # W5 only
    TYPED_DECISIONS_RUN_SLOW=1 pytest benchmarks/test_bench.py        # and the W1 run of all peers
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


def test_w5_http_answers_equal_sequential(tmp_path):
    # 3 clients: while the engine answers the first request, the other two queue and share a batch.
    out = tmp_path / "w5.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--model", "tiny", "--workloads", "W5", "--peers", "ours",
                           "--ours", "fp32", "--modes", "names", "--profile", "none", "--w5-clients", "3",
                           "--w5-requests", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ratios = json.loads(proc.stdout.strip().splitlines()[-1])
    res = json.loads(out.read_text())
    w5 = res["results"]["W5"]
    assert set(res["results"]) == {"W5"} and "partial" not in res
    assert w5["sequential"]["requests"] == 3 and w5["sequential"]["trials"] == 3  # one latency per request
    for system in ("http_batched", "http_unbatched"):
        r = w5[system]
        assert r["errors"] == 0, r["first_errors"]
        assert r["ok"] == r["requests"] == 3 and r["trials"] == 3, r
        assert r["mismatches"] == 0 and r["all_equal_sequential"], r["first_mismatches"]
        assert r["max_abs_diff_vs_sequential"] <= 1e-5
        assert r["server_exit"] is not None  # stopped
        assert ratios[f"W5/{system}/errors"] == 0 and ratios[f"W5/{system}/all_equal_sequential"] is True
    assert w5["http_unbatched"]["engine_calls"] == 3
    assert w5["http_batched"]["engine_calls"] < 3, "the batched server never batched: batched answers untested"
    for key in ("W5/sequential/http_batched", "W5/sequential/http_unbatched", "W5/http_unbatched/http_batched"):
        assert ratios[key] > 0, key
