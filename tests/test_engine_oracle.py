"""Oracle tests: the ONNX engine's decision probabilities against PyTorch on the same weights.

The oracle is independent of everything the engine does: a plain transformers forward pass of the
full prompt (no KV cache, no sharing, no restricted matmul), a full-vocabulary softmax in float64,
then the candidate tokens' mass summed per option and renormalized. ``kv_oracle_option_probs`` is
the same chain rule with transformers' own KV cache of the prompt, for the modules whose prompts
are long (packed trees, few-shot examples): still nothing of the engine's.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions.decider import Decider, parse_request
from typed_decisions.readout import LabelTrie

STATES = [
    "I was charged twice for my subscription and want a refund.",
    "The app crashes every time I open the settings page on Android 14.",
    "Can I get a discount if I buy 50 seats for my company?",
    "Thanks, everything works great now!",
    "My password reset email never arrives, I checked spam too.",
    {"subject": "Invoice", "body": "Please send last month's invoice as PDF.", "priority": 2},
    ["order 1832", "delivered late", "box damaged"],
    "¿Dónde está mi pedido? Lo pedí hace dos semanas.",
    "URGENT!!! production is down, all users get HTTP 500",
    "Hello",
]


_FORWARDS: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}  # (model, ids) -> the oracle's forward, once


def torch_next_token_probs(model, ids: list[int]) -> np.ndarray:
    """Full-vocabulary next-token distribution after ``ids`` (float64): one full forward pass per
    distinct context (the chain rule and the node-by-node check below ask the same nodes), the
    LM head applied to the last position only (``logits_to_keep``: the other positions' logits,
    a vocabulary-wide product per token, are never read)."""
    import torch

    key = (id(model), tuple(ids))
    if key not in _FORWARDS:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1].double()
        _FORWARDS[key] = torch.softmax(logits, dim=-1).numpy()
    return _FORWARDS[key].copy()


def chain_rule(probs_after, paths, owners, n_options: int) -> np.ndarray:
    """P(path) = Π p(t_k | prompt + t_<k), each factor ``probs_after(node)`` (a full-vocabulary
    distribution) renormalized over the trie children at that node; summed per owner, renormalized."""
    trie = LabelTrie.build(paths, owners)
    cond: dict[tuple[int, ...], dict[int, float]] = {}
    for u, kids in trie.children.items():
        mass = probs_after(u)[list(kids)]
        cond[u] = dict(zip(kids, mass / mass.sum()))
    out = np.zeros(n_options)
    for path, o in zip(trie.paths, trie.owners):
        out[o] += np.prod([cond[path[:k]][path[k]] for k in range(len(path))])
    return out / out.sum()


def oracle_option_probs(model, prompt: list[int], paths, owners, n_options: int) -> np.ndarray:
    """The chain rule by independent full forward passes of prompt + node."""
    return chain_rule(lambda u: torch_next_token_probs(model, prompt + list(u)), paths, owners, n_options)


def kv_oracle_option_probs(model, prompt: list[int], paths, owners, n_options: int) -> np.ndarray:
    """The chain rule with transformers' own KV cache: one prefill of the prompt, each node's
    tokens run from a copy of its cache (full-vocabulary softmax in float64)."""
    import copy

    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)

    def probs_after(node: tuple[int, ...]) -> np.ndarray:
        logits = out.logits[0, -1]
        if node:
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([list(node)]), past_key_values=copy.deepcopy(out.past_key_values),
                               use_cache=True, logits_to_keep=1).logits[0, -1]
        return torch.softmax(logits.double(), dim=-1).numpy()

    return chain_rule(probs_after, paths, owners, n_options)


def compiled(decider: Decider, req: dict, mode: str):
    return decider.compiler.compile(parse_request(req), label_mode=mode)


def single_token_requests(n_prompts: int = 20, seed: int = 0) -> list[tuple[dict, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n_prompts):
        k = rng.choice([2, 3, 5, 8, 13, 26, 40, 62])
        options = {f"option {j}": (f"case {j}" if j % 3 else None) for j in range(k)}
        req = {"model": "m", "state": STATES[i % len(STATES)], "questions": {
            "pick": {"type": "choice", "instructions": f"Pick one ({i}).", "criteria": options}}}
        out.append((req, "letters"))
    return out


@pytest.mark.parametrize("case", range(20))
def test_native_oracle_single_token_candidates(tiny_decider, tiny_torch, case):
    req, mode = single_token_requests()[case]
    comp = compiled(tiny_decider, req, mode)
    (q,) = comp.questions
    assert all(len(p) == 1 for p in q.label_paths.paths)  # single-token candidates
    prompt = list(comp.prefix_ids + q.suffix_ids)
    p_full = torch_next_token_probs(tiny_torch, prompt)
    cand = [p[0] for p in q.label_paths.paths]
    expected = np.zeros(len(q.options))
    np.add.at(expected, list(q.label_paths.owners), p_full[cand])
    expected /= expected.sum()
    got = tiny_decider.probabilities(req, label_mode=mode)["pick"]
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert abs(got.sum() - 1) < 1e-12


@pytest.mark.parametrize("mode,criteria", [
    ("names", {"entertainment": None, "enterprise sales": None, "entry level": None, "bug": None,
               "bug report": None, "technical support": "Errors and crashes"}),
    ("names", {"Schadensmeldung": None, "Schadenersatz": None, "Kündigung": None}),
    ("letters", {f"item {j}": None for j in range(70)}),
])
def test_trie_oracle_multi_token_labels(tiny_decider, tiny_torch, mode, criteria):
    req = {"model": "m", "state": STATES[0], "questions": {"t": {"type": "choice", "criteria": criteria}}}
    comp = compiled(tiny_decider, req, mode)
    (q,) = comp.questions
    assert max(len(p) for p in q.label_paths.paths) > 1  # really multi-token
    prompt = list(comp.prefix_ids + q.suffix_ids)
    expected = oracle_option_probs(tiny_torch, prompt, q.label_paths.paths, q.label_paths.owners,
                                   len(q.options))
    got = tiny_decider.probabilities(req, label_mode=mode)["t"]
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # The KV-cached oracle of the long-prompt modules is this one, to float32 rounding
    kv = kv_oracle_option_probs(tiny_torch, prompt, q.label_paths.paths, q.label_paths.owners, len(q.options))
    np.testing.assert_allclose(kv, expected, atol=1e-6, rtol=0)
    # Node by node too: the engine's restricted distribution at each trie node = the oracle's.
    explained = tiny_decider.explain(req, label_mode=mode).questions["t"].nodes
    for node in explained:
        if node.logits is None:
            assert len(node.children) == 1
            continue
        p = torch_next_token_probs(tiny_torch, prompt + node.prefix)[node.children]
        z = np.array(node.logits)
        np.testing.assert_allclose(np.exp(z - z.max()) / np.exp(z - z.max()).sum(), p / p.sum(), atol=1e-5)


THREE = {
    "team": {"type": "choice", "criteria": {"billing": "Payments", "technical support": None, "sales": None}},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "sev": {"type": "score", "criteria": ["low", "medium", "high", "critical"]},
}


@pytest.mark.parametrize("mode", ["names", "letters"])
def test_cache_transparency(tiny_model_dir, mode):
    d = Decider.from_dir(tiny_model_dir, threads=THREADS)
    reqs = [{"model": "m", "state": s, "questions": THREE} for s in STATES[:4]]
    reference = [d.probabilities(r, label_mode=mode, share_prefixes=False, use_cache=False) for r in reqs]
    shared = [d.probabilities(r, label_mode=mode, use_cache=False) for r in reqs]
    d.engine.clear_cache()
    cold = [d.probabilities(r, label_mode=mode) for r in reqs]
    hits_before = d.engine.stats.cache_hits
    warm = [d.probabilities(r, label_mode=mode) for r in reqs]
    assert d.engine.stats.cache_hits >= hits_before + len(reqs)  # really served from the cache
    batched = d.run_many(reqs, label_mode=mode)
    for ref, *others in zip(reference, shared, cold, warm):
        for other in others:
            for name in ref:
                np.testing.assert_allclose(other[name], ref[name], atol=1e-5, rtol=0)
    for ref, resp in zip(reference, batched):
        np.testing.assert_allclose(list(resp.answers["team"].probabilities.values()), ref["team"], atol=1e-5)
        assert abs(resp.answers["urgent"].noul - ref["urgent"][0]) < 1e-5


def test_sharing_computes_fewer_tokens(tiny_model_dir):
    d = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    req = {"model": "m", "state": STATES[0], "questions": THREE}
    before = d.engine.stats.tokens_computed
    resp = d.run(req)
    computed = d.engine.stats.tokens_computed - before
    assert resp.usage.input_tokens > computed  # logical > computed: the prefix ran once
    comp = compiled(d, req, d.label_mode)  # what run() compiled (default: auto)
    assert resp.usage.input_tokens == sum(len(comp.prefix_ids) + len(q.suffix_ids) for q in comp.questions)


def test_score_and_noul_answers_follow_the_probabilities(tiny_decider):
    req = {"model": "m", "state": STATES[8], "questions": THREE}
    probs = tiny_decider.probabilities(req)
    resp = tiny_decider.run(req)
    sev = resp.answers["sev"]
    assert sev.score == pytest.approx(float(np.arange(4) @ probs["sev"]), abs=1e-9)
    assert sev.legend == {"0": "low", "1": "medium", "2": "high", "3": "critical"}
    assert resp.answers["urgent"].noul == pytest.approx(probs["urgent"][0], abs=1e-12)
    team = resp.answers["team"]
    assert team.choice == ["billing", "technical support", "sales"][int(np.argmax(probs["team"]))]
    assert sum(team.probabilities.values()) == pytest.approx(1.0, abs=1e-9)


def test_single_option_choice_has_probability_one(tiny_decider):
    resp = tiny_decider.run({"model": "m", "state": "x", "questions": {
        "only": {"type": "choice", "criteria": {"the one": None}}}})
    assert resp.answers["only"].probabilities == {"the one": 1.0}


def test_empty_questions_are_refused_before_the_engine(tiny_decider):
    from typed_decisions.errors import InvalidRequestError

    runs = tiny_decider.engine.stats.runs
    with pytest.raises(InvalidRequestError, match="at least one question"):
        tiny_decider.run({"model": "m", "state": "x", "questions": {}})
    assert tiny_decider.engine.stats.runs == runs


def test_root_equal_to_a_cached_checkpoint(tiny_model_dir):
    """A context that ends exactly at a checkpoint stored without its hidden state (regression)."""
    d = Decider.from_dir(tiny_model_dir, threads=THREADS)
    req = {"model": "m", "state": STATES[1], "questions": THREE}
    d.run(req)  # stores the head and state-prefix checkpoints
    prefix = compiled(d, req, "names").prefix_ids
    hits = d.engine.stats.cache_hits
    (got,) = d.engine.next_token_logits([prefix], [[49, 50, 51]], cache_points=[len(prefix)])
    assert d.engine.stats.cache_hits == hits + 1
    (ref,) = d.engine.next_token_logits([prefix], [[49, 50, 51]], share_prefixes=False)
    np.testing.assert_allclose(got, ref, atol=1e-4)
