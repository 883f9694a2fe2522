"""benchmarks/many_options.py on the tiny model: its step-by-step answer is the Decider's to the bit,
and a small run writes a schema-1 result whose chunk sizes answer alike."""

from __future__ import annotations

import json

import numpy as np
import pytest
from td_threads import THREADS

from benchmarks.harness import problems, read_results
from benchmarks.workloads import queue_choice

pytestmark = pytest.mark.model


@pytest.mark.parametrize("mode", ["auto", "letters"])
def test_the_steps_answer_as_the_decider(tiny_model_dir, mode):
    from benchmarks.many_options import PHASES, answer_in_phases
    from typed_decisions.decider import Decider

    d = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    body = queue_choice(26)
    p, info = answer_in_phases(d, body, mode)
    np.testing.assert_array_equal(p, d.probabilities(body, label_mode=mode, use_cache=False)["queue"])
    assert set(info["seconds"]) == set(PHASES) and all(v >= 0 for v in info["seconds"].values())
    assert sum(r["tokens"] for r in info["runs"]) == info["tokens_computed"] >= info["prompt_tokens"]
    assert sum(r["label_tokens"] for r in info["runs"]) == info["tokens_computed"] - info["prompt_tokens"]


def test_a_small_run_writes_the_result(tmp_path, tiny_model_dir):
    from benchmarks import many_options

    out = tmp_path / "many.json"
    assert many_options.main(["--model", str(tiny_model_dir), "--options", "3,12", "--modes", "auto",
                              "--chunks", "2048,64", "--threads", str(THREADS), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and doc["tool"] == "many_options"
    systems = read_results(out)["systems"]
    assert set(systems) == {"3/auto/chunk2048", "3/auto/chunk64", "12/auto/chunk2048", "12/auto/chunk64"}
    assert len(systems["12/auto/chunk64"]["runs"]) > len(systems["12/auto/chunk2048"]["runs"])  # chunked
    for n in (3, 12):  # chunking moves no answer (bit for bit on the CPUs measured; 1e-5 asserted)
        a, b = systems[f"{n}/auto/chunk2048"], systems[f"{n}/auto/chunk64"]
        assert a["choice"] == b["choice"] and abs(a["p_max"] - b["p_max"]) <= 1e-5, (a, b)
        assert a["prompt_tokens"] == b["prompt_tokens"] > 0 and a["request_s"] and a["prompt_prefill_s"]
