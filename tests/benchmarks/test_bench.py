"""benchmarks/bench.py end to end on the tiny model: the reference peer is the oracle (its option
probabilities within 1e-5 of ours, float32, as every oracle of this project), the result file has
the schema, the ratios line is the file's medians; W5's HTTP answers equal the in-process ones.

No timing is asserted. Both tests run the script as a user does (``python -m benchmarks.bench``,
in a subprocess, from the repository root) on the cached tiny exports (tests/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import problems, read_results
from td_threads import THREADS

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: int) -> tuple[dict, dict, dict]:
    """(result document, its results, the ratios line) of one run."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(args[args.index("--out") + 1])
    doc = json.loads(out.read_text())
    return doc, read_results(out), json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_reference_peer_agrees_with_ours_to_1e_5(tmp_path, tiny_model_dir, tiny_hf_dir, tiny_int8_model_dir):
    """The reference reads the tiny GGUF's tensors from the folder transformers made of it
    (``tiny_hf_dir``, the same float32 tensors); test_every_peer_runs_on_tiny loads the GGUF itself."""
    out = tmp_path / "w1.json"
    doc, res, ratios = run_bench("--model", str(tiny_model_dir), "--int8-dir", str(tiny_int8_model_dir),
                                 "--trials", "1", "--warmup", "0", "--workloads", "W1,W2", "--peers", "ours,reference",
                                 "--ours", "fp32", "--modes", "names", "--cache", "off", "--packed", "auto",
                                 "--torch-weights", str(tiny_hf_dir), "--profile", "none", "--threads", str(THREADS),
                                 "--out", str(out), timeout=900)
    assert problems(doc) == [] and doc["tool"] == "bench" and "partial" not in doc
    assert res["torch_weights"] == str(tiny_hf_dir)
    assert doc["model"] == res["model"] == "smollm2-135m"
    assert doc["machine"]["load_avg_start"] == res["load_avg_start"]
    for wl in ("W1", "W2"):
        ours, ref = res["results"][wl]["ours_fp32_names_cache-off"], res["results"][wl]["reference"]
        assert ref["max_abs_dp_vs_ours_fp32"] is not None, "ours did not run before the peer"
        assert ref["max_abs_dp_vs_ours_fp32"] <= 1e-5, (wl, ref["max_abs_dp_vs_ours_fp32"],
                                                         ref.get("probabilities_where_apart"), doc["machine"])
        assert ref["tokens_logical"] == ours["tokens_logical"], "the peer read other contexts than ours"
        assert ref["tokens_computed"] >= ours["tokens_computed"]  # no KV reuse: at least every shared token again
        assert ratios[f"{wl}/reference/ours_fp32"] == round(ref["median_s"] / ours["median_s"], 2)


def test_w5_http_answers_equal_sequential(tmp_path, tiny_model_dir, tiny_gguf):
    # 3 clients: while the engine answers the first request, the other two queue and share a batch.
    out = tmp_path / "w5.json"
    doc, res, ratios = run_bench("--model", str(tiny_model_dir), "--workloads", "W5", "--peers", "ours",
                                 "--ours", "fp32", "--modes", "names", "--profile", "none", "--w5-clients", "3",
                                 "--w5-requests", "1", "--out", str(out), timeout=900)
    assert problems(doc) == [] and "partial" not in doc
    w5 = res["results"]["W5"]
    assert set(res["results"]) == {"W5"}
    assert w5["sequential"]["requests"] == 3 and w5["sequential"]["trials"] == 3  # one latency per request
    for system in ("http_batched", "http_unbatched"):
        r = w5[system]
        assert r["errors"] == 0, r["first_errors"]
        assert r["ok"] == r["requests"] == 3 and r["trials"] == 3, r
        assert r["mismatches"] == 0 and r["all_equal_sequential"], r["first_mismatches"]
        assert r["max_abs_diff_vs_sequential"] <= 1e-5
        assert ratios[f"W5/{system}/errors"] == 0 and ratios[f"W5/{system}/all_equal_sequential"] is True
        assert ratios[f"W5/sequential/{system}"] == round(w5["sequential"]["wall_s"] / r["wall_s"], 2)
    assert w5["http_unbatched"]["engine_calls"] == 3
    assert w5["http_batched"]["engine_calls"] < 3, "the batched server never batched: batched answers untested"


@pytest.mark.slow
def test_every_peer_runs_on_tiny(tmp_path, tiny_model_dir, tiny_gguf, tiny_int8_model_dir):
    """All peers on W1 (a few minutes on 2 cores: the free-text peer generates): each ran once or
    says why not; the free-text answers parse."""
    out = tmp_path / "tiny.json"
    _, res, ratios = run_bench("--model", str(tiny_model_dir), "--int8-dir", str(tiny_int8_model_dir), "--trials", "1",
                               "--workloads", "W1", "--modes", "names", "--profile", "int8", "--out", str(out),
                               timeout=1800)
    w1 = res["results"]["W1"]
    for system in ("ours_fp32_names_cache-off", "ours_int8_names_cache-warm", "reference", "free_text"):
        assert w1[system]["trials"] == 1, system
    assert w1["free_text"]["parsed"] == w1["free_text"]["questions"] == 1
    if "llama_cpp" not in w1:
        assert res["skipped"]["llama_cpp"].startswith(("import llama_cpp failed", "no GGUF")), res["skipped"]
    assert res["ort_profile"]["int8"]["op_types_by_time"]
    assert "W1/free_text/ours_fp32" in ratios
