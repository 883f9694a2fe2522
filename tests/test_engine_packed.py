"""Tree blocks on the tiny real model: packed answers = unpacked (radix-batched rows) answers =
transformers on the same weights, within 1e-5 (float32).

The oracle here is transformers with its own KV cache (``kv_oracle_option_probs``: one prefill of
the prompt, each label-trie node a step from a copy of it), independent of the engine's caches and
tree masks. The full-prompt oracle without any cache (test_engine_oracle.py, which checks the
engine's default, packed, path) would re-read these long prompts once per trie node.

Packed: after a node's KV is ready, its pending subtree (question suffixes, label branches, or a
whole request under a shared head) runs as one row with a tree mask (typed_decisions/engine/tree_block.py).
Unpacked: ``packed=False``, every node a row of its own (the engine before tree blocks).
"""

from __future__ import annotations

import numpy as np
import pytest
from td_invariance import TOL, A, B, C, request, vector
from td_threads import THREADS
from test_engine_oracle import STATES, THREE, compiled, kv_oracle_option_probs

from typed_decisions.decider import Decider

pytestmark = pytest.mark.model

MANY = {**THREE, **{f"q{i}": {"type": "noul", "instructions": f"Is statement {i} true?"} for i in range(6)}}
SHARED_FIRST = {"entertainment": None, "enterprise sales": None, "entry level": None,
                "bug": None, "bug report": None, "technical support": "Errors and crashes"}
CASES = {
    "one question": ({"t": {"type": "choice", "criteria": SHARED_FIRST}}, "names"),
    "many questions": (MANY, "names"),
    "200 letter options": ({"p": {"type": "choice", "criteria": {f"item {j}": None for j in range(200)}}}, "letters"),
}


def deciders(tiny_model_dir) -> tuple[Decider, Decider]:
    packed = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    unpacked = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0, packed=False)
    for d in (packed, unpacked):  # every case's whole tree (1,679 tokens at most) fits one packed run
        d.engine.prefill_chunk = 2048
    assert packed.engine.packed and not unpacked.engine.packed, packed.engine.packed_reason
    return packed, unpacked


@pytest.mark.parametrize("case", list(CASES))
def test_packed_equals_unpacked_and_the_transformers_oracle(tiny_model_dir, tiny_torch, case):
    questions, mode = CASES[case]
    req = {"model": "m", "state": STATES[0], "questions": questions}
    packed, unpacked = deciders(tiny_model_dir)
    got = packed.probabilities(req, label_mode=mode)
    ref = unpacked.probabilities(req, label_mode=mode)
    assert packed.engine.stats.packed_rows >= 1                      # really packed
    assert packed.engine.stats.runs < unpacked.engine.stats.runs      # in fewer runs
    assert packed.engine.stats.tokens_computed == unpacked.engine.stats.tokens_computed
    comp = compiled(packed, req, mode)
    for q in comp.questions:
        prompt = list(comp.prefix_ids + q.suffix_ids)
        oracle = kv_oracle_option_probs(tiny_torch, prompt, q.label_paths.paths, q.label_paths.owners, len(q.options))
        np.testing.assert_allclose(got[q.name], ref[q.name], atol=TOL, rtol=0)
        np.testing.assert_allclose(got[q.name], oracle, atol=TOL, rtol=0)


def test_many_letter_options_after_a_chunked_prefill(tiny_model_dir, tiny_torch):
    """150 options (two-letter labels, second letters of both cases, a trie factorized by the
    first letter), packed, after a question prefilled in chunks: the label step is one tree block
    after the last chunk, against kv_oracle_option_probs.

    The chunk is 256 tokens here so that a ~1,100-token listing crosses it four times; at the
    default 2,048 the same path needs ~300 options, and the two ~3,700-token prefills of 500 (ours,
    the oracle's) cost ~40 s for no other code path: attention grows with the square of the
    option count. That 1,000 options compile to distinct labels is tested in test_engine_scale.py;
    packed = unpacked is held, with the same oracle, at 200 letter options above."""
    req = {"model": "m", "state": "I need p42.", "questions": {
        "p": {"type": "choice", "criteria": {f"p{j}": None for j in range(150)}}}}
    d = Decider.from_dir(tiny_model_dir, threads=THREADS)
    d.engine.prefill_chunk = 256
    comp = compiled(d, req, "letters")
    (q,) = comp.questions
    prompt = list(comp.prefix_ids + q.suffix_ids)
    got = d.probabilities(req, label_mode="letters")["p"]
    assert d.engine.stats.packed_rows >= 1
    assert d.engine.stats.runs > len(prompt) // 256  # really chunked

    assert len(set(q.labels)) == 150 and {len(label) for label in q.labels} == {2}
    seconds = {label[1] for label in q.labels}
    assert seconds & set("ABC") and seconds & set("abc")  # second characters of both cases
    assert max(map(len, q.label_paths.paths)) >= 2  # a label is more than one token: a factorized trie
    oracle = kv_oracle_option_probs(tiny_torch, prompt, q.label_paths.paths, q.label_paths.owners, len(q.options))
    np.testing.assert_allclose(got, oracle, atol=TOL, rtol=0)


def test_requests_under_one_head_pack_three_levels_deep(tiny_model_dir, tiny_torch):
    """Cold, two requests share only the template head: the head runs once, then ONE run holds a
    block per request (its state, question suffixes and label branches: names with shared first
    tokens, a branch below a branch, four levels deep). Never one block for both: a request's
    columns would then depend on the other (engine._pack)."""
    questions = {"t": {"type": "choice", "criteria": SHARED_FIRST}, "urgent": THREE["urgent"]}
    reqs = [{"model": "m", "state": s, "questions": questions} for s in (STATES[1], STATES[3])]
    packed, unpacked = deciders(tiny_model_dir)
    got = [vector(r) for r in packed.run_many(reqs, label_mode="names")]
    ref = [vector(r) for r in unpacked.run_many(reqs, label_mode="names")]
    # Run 1: the head (one node, though both states begin with the same tokens: a shared node ends
    # at a cache point, never inside a state); run 2: a block per request.
    assert packed.engine.stats.runs == 2 and packed.engine.stats.packed_rows == 2
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, atol=TOL, rtol=0)
    for req in reqs:  # and the oracle, per request
        comp = compiled(packed, req, "names")
        alone = packed.probabilities(req, label_mode="names")
        for q in comp.questions:
            prompt = list(comp.prefix_ids + q.suffix_ids)
            oracle = kv_oracle_option_probs(tiny_torch, prompt, q.label_paths.paths, q.label_paths.owners, len(q.options))
            np.testing.assert_allclose(alone[q.name], oracle, atol=TOL, rtol=0)


def test_a_state_cached_inside_a_block_is_reused_with_equal_answers(tiny_model_dir):
    """The states of a cold two-request call are computed inside one block (with the head); their
    checkpoints still go to the prefix cache, and a later call served from it answers the same."""
    d = Decider.from_dir(tiny_model_dir, threads=THREADS)
    first = [vector(r) for r in d.run_many([request(A), request(B)])]
    assert d.engine.stats.packed_rows >= 1
    hits, computed = d.engine.stats.cache_hits, d.engine.stats.tokens_computed
    again = [vector(d.run(request(s))) for s in (A, B)]
    assert d.engine.stats.cache_hits == hits + 2
    computed_alone = d.engine.stats.tokens_computed - computed
    fresh = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0, packed=False)
    unpacked = [vector(fresh.run(request(s))) for s in (A, B)]
    prefixes = sum(len(compiled(d, request(s), d.label_mode).prefix_ids) for s in (A, B))
    assert computed_alone == fresh.engine.stats.tokens_computed - prefixes  # only suffixes and labels ran
    for a, b, c in zip(first, again, unpacked):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)
        np.testing.assert_allclose(a, c, atol=TOL, rtol=0)
    d.run(request(C))  # C shares A's state prefix: served from A's cached head at least
    np.testing.assert_allclose(vector(d.run(request(C))), vector(fresh.run(request(C))), atol=TOL, rtol=0)


def test_a_small_block_budget_splits_blocks_without_changing_answers(tiny_model_dir):
    packed, unpacked = deciders(tiny_model_dir)
    tight = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    tight.engine.prefill_chunk = 1 << 20
    tight.engine.max_batch_tokens = 64  # blocks of whole subtrees of <= 64 tokens (a suffix is ~25)
    req = {"model": "m", "state": STATES[2], "questions": MANY}
    a = vector(packed.run(req))
    b = vector(tight.run(req))
    c = vector(unpacked.run(req))
    assert packed.engine.stats.runs < tight.engine.stats.runs
    assert tight.engine.stats.packed_rows >= 2 > packed.engine.stats.packed_rows
    np.testing.assert_allclose(a, b, atol=TOL, rtol=0)
    np.testing.assert_allclose(a, c, atol=TOL, rtol=0)


def test_long_blocks_run_alone_and_answer_the_same(tiny_model_dir):
    """Blocks of at least ``solo_tokens`` tokens run as their own runs (stacking them would only
    pad them to the longest row); short ones still share runs. Answers do not depend on it."""
    reqs = [request(A), request(B), request(C)]
    stacked = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    stacked.engine.solo_tokens = 1 << 30          # every block stacked, as before the rule
    solo = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    solo.engine.solo_tokens = 8                   # every request's block (state + questions) alone
    a = [vector(r) for r in stacked.run_many(reqs, use_cache=False)]
    b = [vector(r) for r in solo.run_many(reqs, use_cache=False)]
    assert solo.engine.stats.tokens_computed == stacked.engine.stats.tokens_computed
    assert solo.engine.stats.runs >= stacked.engine.stats.runs + 2   # three blocks, three runs
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=TOL, rtol=0)


@pytest.mark.int8_u8s8("opens the per-tensor negative control (packing only)")
def test_int8_packs_by_default_but_not_with_per_tensor_scales(tiny_int8_model_dir, tiny_int8_per_tensor_dir):
    """Per-token INT8 packs (one request per row: tests/test_engine_invariance.py holds its answers
    to 1e-5 in any company); per-tensor scales would span a whole block, so those stay rows."""
    d = Decider.from_dir(tiny_int8_model_dir, threads=THREADS)
    assert d.engine.packed, d.engine.packed_reason
    d.run(request(A))
    assert d.engine.stats.packed_rows > 0
    per_tensor = Decider.from_dir(tiny_int8_per_tensor_dir, threads=THREADS, cpu_check=False)
    assert not per_tensor.engine.packed and "per-tensor" in per_tensor.engine.packed_reason
