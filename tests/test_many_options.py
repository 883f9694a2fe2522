"""Many options (#33): jevcompat's many-option choice on the tiny model against the slow simple way.

The oracle runs ONNX Runtime without anything the engine adds for speed: the prompt is prefilled
once as a plain chain, then each label path's tokens (all but its last) run as one plain chain
after that prompt's KV — no radix tree, no label trie, no tree mask, no sharing between paths. The
factor of token t_k is the restricted softmax, at t_<k, over the next tokens the paths show there
(found from the paths themselves); a path's probability is their product, an option's the sum of
its paths', renormalized. The engine reads the same logits at the trie's nodes, packed into one
tree block after the listing (or, above ``prefill_chunk`` tokens, after the listing's chunks).

Names (``auto`` for a choice): ``Queue 001`` ... read digit by digit, five tokens deep, case
variants included. Letters above 62 options: two-character labels.
"""

from __future__ import annotations

import numpy as np
import pytest
from td_invariance import TOL
from td_threads import THREADS

from benchmarks.workloads import queue_choice
from typed_decisions.decider import Decider, parse_request
from typed_decisions.engine.tree_block import chain
from typed_decisions.readout import restricted_softmax

pytestmark = pytest.mark.model


def ort_path_oracle(d: Decider, prompt: list[int], paths, owners, n_options: int) -> np.ndarray:
    """Option probabilities from one plain ORT forward per label path after the prompt's own KV."""
    backbone = d.engine.backbone
    hidden, prompt_kv = backbone.run_blocks([chain(prompt)], backbone.empty(1))
    root_hidden = hidden[0, -1]
    after: dict[tuple[int, ...], set[int]] = {}
    for path in paths:
        for k in range(len(path)):
            after.setdefault(tuple(path[:k]), set()).add(path[k])
    out = np.zeros(n_options)
    for path, owner in zip(paths, owners):
        states = [root_hidden]
        if len(path) > 1:  # hidden after prompt + path[:k], k = 1 .. len - 1
            h, _ = backbone.run_blocks([chain(path[:-1])], prompt_kv)
            states += list(h[0])
        p = 1.0
        for k, h in enumerate(states):
            kids = sorted(after[tuple(path[:k])])
            p *= restricted_softmax(d.engine.logits(h, kids))[kids.index(path[k])]
        out[owner] += p
    return out / out.sum()


@pytest.mark.parametrize("n,mode", [(26, "names"), (70, "letters")])
def test_many_options_equal_one_plain_forward_per_label_path(tiny_model_dir, n, mode):
    d = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    body = queue_choice(n)
    comp = d.compiler.compile(parse_request(body), label_mode=mode)
    (q,) = comp.questions
    assert max(len(p) for p in q.label_paths.paths) >= (5 if mode == "names" else 2)  # a deep trie
    got = d.probabilities(body, label_mode=mode)["queue"]
    assert d.engine.stats.packed_rows >= 1  # the label branches ran as a tree block
    prompt = list(comp.prefix_ids + q.suffix_ids)
    want = ort_path_oracle(d, prompt, q.label_paths.paths, q.label_paths.owners, n)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert abs(got.sum() - 1) < 1e-12


def test_a_listing_over_the_prefill_chunk_answers_as_the_oracle(tiny_model_dir):
    """The listing prefilled in chunks (as 128 and 255 options are at the default 2,048), then the
    label branches after it: the same answer as the plain-forward oracle."""
    d = Decider.from_dir(tiny_model_dir, threads=THREADS, cache_bytes=0)
    d.engine.prefill_chunk = 128
    body = queue_choice(26)
    comp = d.compiler.compile(parse_request(body), label_mode="names")
    (q,) = comp.questions
    prompt = list(comp.prefix_ids + q.suffix_ids)
    got = d.probabilities(body, label_mode="names")["queue"]
    assert d.engine.stats.runs > len(prompt) // 128  # really chunked
    want = ort_path_oracle(d, prompt, q.label_paths.paths, q.label_paths.owners, 26)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
