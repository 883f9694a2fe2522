"""One answer per request: the same probabilities alone, in a batch with unrelated or
prefix-sharing requests, cold or after a warm prefix cache, and through the HTTP server under 16
concurrent clients — for float32 and for INT8 (per-token activation scales), within 1e-5.

The negative check: an INT8 export with per-tensor activation scales (quantize_dynamic's pattern,
this project's INT8 before per-token quantization), batched the same way, does NOT give one answer
per request. It shows the comparison can fail; it is why such exports run one row per call.
"""

from __future__ import annotations

import numpy as np
import pytest
from td_invariance import TOL, A, B, LiveServer, deviations, request
from td_threads import THREADS

from typed_decisions.decider import Decider


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_one_answer_per_request(dtype, tiny_model_dir, tiny_int8_model_dir):
    d = Decider.from_dir(tiny_model_dir if dtype == "float32" else tiny_int8_model_dir, threads=THREADS)
    assert d.engine.max_batch_rows > 1  # rows really share runs (INT8 too)
    runs_before = d.engine.stats.runs
    with LiveServer(d) as url:
        dev = deviations(d, url)
    assert max(dev.values()) <= TOL, dev
    assert d.engine.stats.runs > runs_before


@pytest.mark.int8_u8s8("the per-tensor negative control (no u8*u8 twin)")
def test_per_tensor_int8_depends_on_company(tiny_int8_per_tensor_dir):
    """The documented negative: per-tensor activation scales, batched like float32, move A's
    probabilities with its batch-mates and cache splits by far more than the tolerance."""
    forced = Decider.from_dir(tiny_int8_per_tensor_dir, threads=THREADS, max_batch_rows=32, cpu_check=False)
    dev = deviations(forced)  # why the engine runs such exports one row per call (or refuses them)
    assert max(dev.values()) > 100 * TOL, dev


# --------------------------------------------------------------------------- the engine's bookkeeping


def test_batched_requests_use_and_fill_the_cache_per_request(tiny_model_dir):
    """run_many keeps each request's checkpoints: a state seen alone is reused when it comes back
    in a batch, and a state first seen in a batch is reused alone."""
    d = Decider.from_dir(tiny_model_dir, threads=THREADS)
    d.run(request(A))
    hits, computed = d.engine.stats.cache_hits, d.engine.stats.tokens_computed
    d.run_many([request(B), request(A)])  # A's state from the cache, B's computed and stored
    assert d.engine.stats.cache_hits >= hits + 1
    first = d.engine.stats.tokens_computed - computed
    hits = d.engine.stats.cache_hits
    computed = d.engine.stats.tokens_computed
    d.run(request(B))
    assert d.engine.stats.cache_hits == hits + 1
    assert d.engine.stats.tokens_computed - computed < first / 2  # only B's question suffixes and labels


@pytest.mark.parametrize("cache_bytes", [0, 64 << 20])
def test_long_prompts_prefill_in_chunks_with_the_same_answers(tiny_model_dir, cache_bytes):
    # With the cache on, the chunked edge starts after a cached checkpoint (the template head):
    # its chunks attend to that parent's KV as well as to each other.
    d = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    whole = d.probabilities(request(A * 4))
    d = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=cache_bytes)
    d.probabilities(request(B))  # warms the template head when the cache is on
    runs = d.engine.stats.runs
    d.engine.prefill_chunk = 16
    chunked = d.probabilities(request(A * 4))
    assert d.engine.stats.runs - runs > 5  # the prefill really ran in several chunks
    for name in whole:
        np.testing.assert_allclose(chunked[name], whole[name], atol=TOL, rtol=0)


def test_a_call_over_the_kv_budget_is_refused_with_the_numbers(tiny_model_dir):
    from typed_decisions.errors import EngineError

    d = Decider.from_dir(tiny_model_dir, threads=THREADS, max_call_kv_bytes=1 << 20)
    with pytest.raises(EngineError, match=r"KV cache of \d+ distinct tokens .* max_call_kv_bytes \(1 MiB\)"):
        d.run(request(A * 10))


# --------------------------------------------------------------------------- INT8 on this CPU


def _with_manifest(src, dst, change):
    """A copy of an export (files linked, not copied) whose manifest is changed by `change`."""
    import json
    import os

    dst.mkdir()
    for p in src.iterdir():
        if p.name not in ("manifest.json", ".verified.json"):
            os.symlink(p, dst / p.name)
    manifest = json.loads((src / "manifest.json").read_text())
    change(manifest["quantization"])
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_int8_on_another_cpu_class_is_rechecked_at_load(tiny_int8_model_dir, tmp_path):
    from typed_decisions.cpu import cpu_class

    other = "amx" if cpu_class() != "amx" else "avx2"
    moved = _with_manifest(tiny_int8_model_dir, tmp_path / "m", lambda q: q["cpu"].update({"class": other}))
    d = Decider.from_dir(moved, threads=THREADS)
    found = d.engine.cpu_check
    assert found["measured_on"] == other and found["cpu"] == cpu_class()
    assert found["max_abs_prob"] is not None and found["max_abs_prob"] <= 1e-4  # exact integers: same answers
    same = Decider.from_dir(tiny_int8_model_dir, threads=THREADS).engine.cpu_check
    assert same["max_abs_prob"] is None  # measured on this class: nothing re-run


def test_int8_whose_probes_moved_is_refused(tiny_int8_model_dir, tmp_path):
    from typed_decisions.errors import EngineError

    def tamper(q):
        q["cpu"]["class"] = "some-other-cpu"
        q["load_check"]["probabilities"] = [row[::-1] for row in q["load_check"]["probabilities"]]

    with pytest.raises(EngineError, match="serving on .*moved by"):
        Decider.from_dir(_with_manifest(tiny_int8_model_dir, tmp_path / "m", tamper), threads=THREADS)


@pytest.mark.int8_u8s8("opens the per-tensor export to show the engine refuses it where it saturates")
def test_per_tensor_int8_is_refused_where_it_saturates(tiny_int8_per_tensor_dir):
    from typed_decisions.cpu import cpu_class
    from typed_decisions.errors import EngineError

    if cpu_class() in ("avx512-vnni", "amx"):
        assert Decider.from_dir(tiny_int8_per_tensor_dir, threads=THREADS).engine.max_batch_rows == 1
    else:
        with pytest.raises(EngineError, match="saturate int16"):
            Decider.from_dir(tiny_int8_per_tensor_dir, threads=THREADS)
