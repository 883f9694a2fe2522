"""Few-shot examples (issue #14, lever 6) on the tiny real model, against independent paths.

- the probabilities of a request with examples equal transformers on the full rendered prompt
  (examples, state, question; test_engine_oracle's chain-rule oracle, each trie node a step from
  transformers' own KV cache of the prompt);
- two requests with the same examples and different states reuse the examples' KV (the engine's
  prefix-cache counters), and give the same probabilities as the same requests with no cache.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_oracle import kv_oracle_option_probs

from typed_decisions.decider import parse_request

pytestmark = pytest.mark.model

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Payments, refunds", "technical": "Bugs, crashes", "sales": None}},
    "sev": {"type": "score", "instructions": "How severe is it?", "criteria": ["low", "medium", "high"]},
    "urgent": {"type": "noul", "instructions": "Does the customer need an answer today?"},
}
EXAMPLES = [
    {"state": "Please refund the second charge on my card.", "answers": {"team": "billing", "sev": "1", "urgent": "no"}},
    {"state": "Production is down, every page returns HTTP 500!", "answers": {"team": "technical", "sev": "2",
                                                                             "urgent": "yes"}},
    {"state": {"subject": "Quote", "body": "Price for 40 seats?"}, "answers": {"team": "sales", "sev": "0"}},
]
STATES = ["I was charged twice for my subscription and want a refund.",
          "The app crashes every time I open the settings page."]


def request(state, examples=EXAMPLES, **extra):
    return {"model": "m", "state": state, "questions": QUESTIONS, "examples": examples, **extra}


@pytest.mark.parametrize("mode", ["auto", "letters", "mixture"])
def test_probabilities_with_examples_equal_a_transformers_forward(tiny_decider, tiny_torch, mode):
    req = parse_request(request(STATES[0]))
    comp = tiny_decider.compiler.compile(req, label_mode=mode)
    got = tiny_decider.probabilities(req, label_mode=mode)
    text = tiny_decider.tokenizer.decode(list(comp.prefix_ids))
    assert text.index("Price for 40 seats") < text.index(STATES[0])  # the examples come first
    for q in comp.questions:
        want = kv_oracle_option_probs(tiny_torch, list(comp.prefix_ids + q.suffix_ids), q.label_paths.paths,
                                      q.label_paths.owners, len(q.options))
        np.testing.assert_allclose(got[q.name], want, atol=1e-5)
    plain = tiny_decider.probabilities(request(STATES[0], examples=None), label_mode=mode)
    assert max(np.abs(got[n] - plain[n]).max() for n in got) > 1e-3  # the examples change the answer


def test_the_examples_kv_is_reused_across_states(tiny_decider):
    eng = tiny_decider.engine
    eng.clear_cache()
    first = parse_request(request(STATES[0]))
    head = tiny_decider.compiler.compile(first).checkpoints[0]
    assert head > 300  # system + three examples × their questions
    tiny_decider.probabilities(first)
    before = (eng.stats.cache_hits, eng.stats.cache_tokens_reused, eng.stats.tokens_computed)
    second = request(STATES[1])
    warm = tiny_decider.probabilities(second)
    comp = tiny_decider.compiler.compile(parse_request(second))
    assert eng.stats.cache_hits == before[0] + 1
    assert eng.stats.cache_tokens_reused - before[1] == head  # the examples' head, not the new state
    computed = eng.stats.tokens_computed - before[2]
    start = eng.stats.tokens_computed
    cold = tiny_decider.probabilities(second, use_cache=False)
    assert computed == (eng.stats.tokens_computed - start) - head  # only the examples were skipped
    for n in cold:
        np.testing.assert_allclose(warm[n], cold[n], atol=1e-5)
    # the same state again: the whole prefix (examples + state) is a hit
    again = tiny_decider.probabilities(second)
    assert eng.stats.cache_tokens_reused - before[1] == head + len(comp.prefix_ids)
    for n in cold:
        np.testing.assert_allclose(again[n], cold[n], atol=1e-5)


def test_rotate_shows_the_examples_canonically_and_averages_oracle_rotations(tiny_decider, tiny_torch):
    team = QUESTIONS["team"]
    ex = [{"state": e["state"], "answers": {"team": e["answers"]["team"]}} for e in EXAMPLES]
    body = {"model": "m", "state": STATES[0], "questions": {"team": team}, "examples": ex}
    comp = tiny_decider.compiler.compile(parse_request({**body, "debias": "rotate"}), label_mode="letters")
    canonical = tiny_decider.compiler.compile(parse_request({**body, "debias": "canonical"}), label_mode="letters")
    assert comp.prefix_ids == canonical.prefix_ids and len(comp.rotations[0]) == len(team["criteria"]) - 1
    got = tiny_decider.probabilities({**body, "debias": "rotate"}, label_mode="letters")["team"]
    want = [kv_oracle_option_probs(tiny_torch, list(comp.prefix_ids + q.suffix_ids), q.label_paths.paths,
                                   q.label_paths.owners, len(q.options))
            for q in (comp.questions[0], *comp.rotations[0])]
    np.testing.assert_allclose(got, np.mean(want, axis=0), atol=1e-5)


