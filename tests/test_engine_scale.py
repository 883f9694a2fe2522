"""Many options and many threads: labels stay distinct, answers stay those of sequential runs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from td_threads import THREADS

from typed_decisions.compiler import Compiler
from typed_decisions.decider import parse_request
from typed_decisions.readout import LabelTrie, readout_count


def test_thousand_letter_options_compile_to_distinct_paths(tiny_decider):
    options = {f"product {i}": None for i in range(1000)}
    req = parse_request({"model": "m", "state": "x", "questions": {"p": {"type": "choice", "criteria": options}}})
    unlimited = Compiler(tiny_decider.tokenizer, tiny_decider.template)  # 1000 lines > 8192 tokens
    (q,) = unlimited.compile(req, label_mode="letters").questions
    trie = LabelTrie.build(q.label_paths.paths, q.label_paths.owners)
    assert sorted(set(trie.owners)) == list(range(1000))
    assert len(set(q.labels)) == 1000
    assert readout_count(trie) < 1000 // 10  # a few dozen trie readouts, not one per option


def test_many_options_decide_as_without_sharing(tiny_decider):
    """120 options (two-letter labels: a two-level trie) with shared prefixes and the cache, and
    without: every trie node a full prompt (~900 tokens each; at 300 options this took ~3 min on
    an AVX2 CPU, all of it in the unshared reference)."""
    options = {f"item {i}": None for i in range(120)}
    req = {"model": "m", "state": "I need item 42.", "questions": {"p": {"type": "choice", "criteria": options}}}
    probs = tiny_decider.probabilities(req, label_mode="letters")["p"]
    ref = tiny_decider.probabilities(req, label_mode="letters", share_prefixes=False, use_cache=False)["p"]
    assert probs.shape == (120,) and abs(probs.sum() - 1) < 1e-9
    np.testing.assert_allclose(probs, ref, atol=1e-5)


def test_concurrent_callers_get_sequential_answers(tiny_decider):
    states = ["The app crashes on start.", "Refund my order please.", "Do you sell gift cards?",
              "My account was hacked!", "Thanks for the quick help."]
    reqs = [{"model": "m", "state": s, "questions": {
        "team": {"type": "choice", "criteria": {"billing": None, "technical": None, "sales": None}},
        "urgent": {"type": "noul", "instructions": "Is it urgent?"}}} for s in states * 2]
    sequential = [tiny_decider.probabilities(r) for r in reqs]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(tiny_decider.probabilities, reqs))
    for a, b in zip(sequential, concurrent):
        for name in a:
            np.testing.assert_allclose(a[name], b[name], atol=1e-5)


def test_kv_byte_budget_splits_batches_without_changing_answers(tiny_model_dir):
    from typed_decisions.decider import Decider

    options = {f"enterprise plan {i}": None for i in range(12)}  # multi-token names: label branches
    req = {"model": "m", "state": "Which plan fits a team of 40?", "questions": {
        "p": {"type": "choice", "criteria": options}}}
    roomy = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    tight = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    tight.engine.max_batch_kv_bytes = 1  # every row alone
    a = roomy.probabilities(req)["p"]
    runs_roomy = roomy.engine.stats.runs
    b = tight.probabilities(req)["p"]
    assert tight.engine.stats.runs > runs_roomy  # the budget really split the batches
    np.testing.assert_allclose(a, b, atol=1e-5)
