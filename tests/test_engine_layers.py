"""Mid-layer states (``hidden_state.{k}``, docs/FORMAT.md) on the tiny real model: the engine's vector
at a context's last position equals transformers' ``output_hidden_states`` at that layer and
position (the oracle; ``hidden_states[k]`` is the residual stream after k layers, ``[0]`` the
embeddings), and is the same alone, batched, tree-packed, cached and chunked; ``Decider.features``
returns it beside the last layer's; an export without the outputs keeps last-layer heads and
refuses mid-layer reads by name."""

from __future__ import annotations

import numpy as np
import pytest
from td_threads import THREADS
from test_engine_oracle import STATES, THREE, compiled

from typed_decisions.decider import Decider, parse_request
from typed_decisions.engine import Engine
from typed_decisions.errors import EngineError

pytestmark = pytest.mark.model

TEAM = {"type": "choice", "instructions": "Which team should handle this ticket?",
        "criteria": {"billing": "payments, refunds, invoices", "tech": "bugs, errors, crashes"}}
ROWS = [{"state": STATES[0], "answer": "billing"}, {"state": STATES[1], "answer": "tech"}]


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference over the largest magnitude (the residual stream reaches ~100 here)."""
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def contexts(d: Decider) -> tuple[list[tuple[int, ...]], int]:
    """Every question's answer position of two requests (a shared head, then each state), one label
    branch below one of them, and the first request's prefix itself (a context ending exactly at a
    checkpoint); and that prefix's length."""
    out = []
    for state in STATES[:2]:
        comp = compiled(d, {"model": "m", "state": state, "questions": THREE}, "names")
        out += [comp.prefix_ids + q.suffix_ids for q in comp.questions]
    first = compiled(d, {"model": "m", "state": STATES[0], "questions": THREE}, "names")
    out += [out[0] + (first.questions[0].label_paths.paths[0][0],), first.prefix_ids]
    return out, len(first.prefix_ids)


def alone(engine: Engine, ctx) -> np.ndarray:
    got: list[np.ndarray] = []
    engine.next_token_logits([ctx], [[0]], share_prefixes=False, layers_out=got)
    return got[0]                                                                        # (L, H)


def test_the_default_export_outputs_layers_at_a_half_and_two_thirds_of_the_depth(tiny_decider):
    n = tiny_decider.artifacts.architecture.num_layers
    assert tiny_decider.engine.hidden_layers == (n // 2, 2 * n // 3) == (15, 20)
    assert tiny_decider.artifacts.manifest["hidden_layers"] == [15, 20]


def test_mid_layers_equal_transformers_hidden_states_at_that_layer_and_position(tiny_decider, tiny_torch):
    import torch

    layers = tiny_decider.engine.hidden_layers
    for ctx in contexts(tiny_decider)[0][::3]:
        got = alone(tiny_decider.engine, ctx)
        assert got.shape == (len(layers), tiny_decider.artifacts.architecture.hidden_size)
        with torch.no_grad():
            hs = tiny_torch.model(input_ids=torch.tensor([ctx]), output_hidden_states=True).hidden_states
        for row, k in zip(got, layers):
            assert rel(row, hs[k][0, -1].numpy()) < 1e-5, k
            for j in (k - 1, k + 1):  # the convention: k layers done, not one more or one less
                assert rel(row, hs[j][0, -1].numpy()) > 1e-2


def test_mid_layers_are_the_same_alone_batched_packed_cached_and_chunked(tiny_model_dir, tiny_decider):
    ctxs, cut = contexts(tiny_decider)
    ref = [alone(tiny_decider.engine, c) for c in ctxs]
    allowed = [[0]] * len(ctxs)

    def layers(engine: Engine, **kw) -> list[np.ndarray]:
        got: list[np.ndarray] = []
        engine.next_token_logits(ctxs, allowed, layers_out=got, **kw)
        return got

    packed = Engine(tiny_decider.artifacts, threads=THREADS, cache_bytes=0)
    unpacked = Engine(tiny_decider.artifacts, threads=THREADS, cache_bytes=0, packed=False)
    chunked = Engine(tiny_decider.artifacts, threads=THREADS, cache_bytes=0, prefill_chunk=16)
    cached = Engine(tiny_decider.artifacts, threads=THREADS)
    ways = {"packed": layers(packed), "unpacked": layers(unpacked), "chunked": layers(chunked),
            "cold": layers(cached, cache_points=[cut])}
    assert packed.stats.packed_rows >= 1 and unpacked.stats.packed_rows == 0
    assert cached.prefix_cache.used > 0
    assert cached.stats.cache_hits == 0
    ways["warm"] = layers(cached, cache_points=[cut])  # the prefix context's states come from the cache
    assert cached.stats.cache_hits == 2  # each request's checkpoint
    for way, got in ways.items():
        for g, r in zip(got, ref):
            assert g.shape == r.shape and rel(g, r) < 1e-6, way


def test_the_prefix_cache_counts_mid_layer_states_in_its_budget(tiny_decider):
    ctxs, cut = contexts(tiny_decider)
    engine = Engine(tiny_decider.artifacts, threads=THREADS)
    engine.next_token_logits(ctxs[-1:], [[0]], cache_points=[cut])
    ((kv, hidden, layers),) = engine.prefix_cache._entries.values()
    assert layers.shape == (2, hidden.size)
    assert engine.prefix_cache.used == kv.nbytes + hidden.nbytes + layers.nbytes


def test_features_returns_the_mid_layers_beside_the_last_layer(tiny_decider):
    hidden, probs, groups = tiny_decider.features(TEAM, ROWS)
    h, p, g, mids = tiny_decider.features(TEAM, ROWS, layers=True)
    assert mids.shape == (2, 2, hidden.shape[1]) and mids.dtype == np.float64
    # the second call starts from the first's cached prefixes: the same numbers, up to float32 order
    assert rel(h, hidden) < 1e-6 and np.max(np.abs(p - probs)) < 1e-5
    np.testing.assert_array_equal(g, groups)
    for i, row in enumerate(ROWS):
        comp = tiny_decider.compiler.compile(parse_request({"model": "m", "state": row["state"], "questions": {"q": TEAM}}))
        (q,) = comp.questions
        assert rel(mids[i], alone(tiny_decider.engine, comp.prefix_ids + q.suffix_ids)) < 1e-6


def test_an_export_without_mid_layers_keeps_last_layer_heads_and_refuses_mid_layer_reads(tiny_decider,
                                                                                          tiny_bare_dir):
    bare = Decider.from_dir(tiny_bare_dir, threads=THREADS)
    assert bare.engine.hidden_layers == () and bare.artifacts.manifest["hidden_layers"] == []
    hidden, probs, _ = bare.features(TEAM, ROWS)
    h, p, _ = tiny_decider.features(TEAM, ROWS)
    assert rel(hidden, h) < 1e-6 and np.max(np.abs(probs - p)) < 1e-5  # the same numbers, up to cache order
    with pytest.raises(EngineError, match="no mid-layer states.*Heads over the last layer work.*re-export"):
        bare.features(TEAM, ROWS, layers=True)
    with pytest.raises(EngineError, match="no mid-layer states"):
        bare.engine.next_token_logits([(1, 2, 3)], [[0]], layers_out=[])
    assert bare.export_sha256 != tiny_decider.export_sha256  # another graph: heads fitted on one are refused on the other
