"""Decider behaviour beyond the oracle: calibration is applied visibly, confidence selection, batching."""

from __future__ import annotations

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions import Choice, Decider, Noul, Score
from typed_decisions.calibration import CalibrationFile, TypeCalibration, calibrate
from typed_decisions.decider import parse_request
from typed_decisions.readout_plan import plan_readout
from typed_decisions.readout import LabelTrie, option_probabilities
from typed_decisions.reducers import confidence

pytestmark = pytest.mark.model  # every test here runs the tiny real export

STATE = "The checkout page throws an error 500 since this morning, customers cannot pay."
QUESTIONS = {
    "team": Choice(instructions="Which team?", criteria={"billing": None, "technical": "Bugs, errors", "sales": None}),
    "urgent": Noul(instructions="Is it urgent?"),
    "sev": Score(criteria=["low", "medium", "high"]),
}


def _uncached_probabilities(decider, request) -> dict[str, np.ndarray]:
    """Option probabilities straight from the engine: every readout context a separate full
    forward pass (no radix tree, no prefix cache), then the chain rule of readout.py."""
    comp = decider.compiler.compile(parse_request(request), label_mode=decider.label_mode)
    out = {}
    for q in comp.questions:
        trie = LabelTrie.build(q.label_paths.paths, q.label_paths.owners)
        nodes = [(u, kids) for u, kids in trie.internal_nodes() if len(kids) > 1]
        logits = decider.engine.next_token_logits([comp.prefix_ids + q.suffix_ids + u for u, _ in nodes],
                                                  [kids for _, kids in nodes], use_cache=False,
                                                  share_prefixes=False)
        out[q.name] = option_probabilities(trie, {u: z for (u, _), z in zip(nodes, logits)}, len(q.options))
    return out


def test_typed_python_api(tiny_decider):
    resp = tiny_decider.decide(STATE, QUESTIONS)
    team, urgent, sev = (resp.answers[k] for k in ("team", "urgent", "sev"))
    assert team.type == "choice" and urgent.type == "noul" and sev.type == "score"
    assert all(a.calibration is None for a in resp.answers.values())
    # The probabilities are the engine's, computed the slow independent way ...
    direct = _uncached_probabilities(tiny_decider, {"model": "m", "state": STATE, "questions": {
        k: v.model_dump(exclude_none=True) for k, v in QUESTIONS.items()}})
    np.testing.assert_allclose(list(team.probabilities.values()), direct["team"], atol=1e-5)
    np.testing.assert_allclose(list(sev.probabilities.values()), direct["sev"], atol=1e-5)
    assert urgent.noul == pytest.approx(direct["urgent"][0], abs=1e-5)
    # ... and every derived number follows from the returned probabilities by hand.
    p = sev.probabilities
    assert sev.score == pytest.approx(0 * p["0"] + 1 * p["1"] + 2 * p["2"], abs=1e-12)
    assert sev.legend == {"0": "low", "1": "medium", "2": "high"}
    p_team = team.probabilities
    assert team.choice == max(p_team, key=p_team.get)
    assert team.confidence == pytest.approx((3 * p_team[team.choice] - 1) / 2, abs=1e-12)  # typesafe, k = 3
    assert sum(p_team.values()) == pytest.approx(1.0, abs=1e-12)


def test_readout_plan_is_what_the_engine_reads(tiny_decider):
    """``plan_readout`` (what benchmarks/bench.py feeds its peers) gives Decider's probabilities."""
    request = {"model": "m", "state": STATE, "questions": {k: v.model_dump(exclude_none=True)
                                                           for k, v in QUESTIONS.items()}}
    comp = tiny_decider.compiler.compile(parse_request(request), label_mode=tiny_decider.label_mode)
    plan = plan_readout([comp])
    assert len(plan.contexts) == len(plan.allowed) == len(plan.where)
    assert all(len(kids) > 1 for kids in plan.allowed)
    logits = tiny_decider.engine.next_token_logits(plan.contexts, plan.allowed, use_cache=False)
    got = {r.question.name: r.probabilities() for r in plan.readouts(logits)[0]}
    want = tiny_decider.probabilities(request, use_cache=False)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-12)


def test_calibration_file_is_applied_and_visible(tiny_model_dir, tiny_decider, tmp_path):
    # The expected values come from other engine calls (other questions in the call, the
    # content-free state asked alone): float32 tree blocks of different calls are laid out
    # differently and agree to ~1e-7 (docs/METHOD.md); T = 0.5 and the division by p_cf amplify
    # that to ~2e-6, so the engine's own 1e-5 rather than bit for bit.
    TOL = 1e-5
    cal = CalibrationFile(model="smollm2-135m", created="2026-11-30T00:00:00Z",
                          per_type={"choice": TypeCalibration(temperature=2.5),
                                    "noul": TypeCalibration(temperature=0.5, contextual=True)},
                          content_free_state="N/A")
    path = tmp_path / "cal.json"
    cal.save(path)
    calibrated = Decider.from_dir(tiny_model_dir, threads=THREADS, calibration=path)
    raw = tiny_decider.probabilities({"model": "m", "state": STATE, "questions": {
        k: v.model_dump(exclude_none=True) for k, v in QUESTIONS.items()}})
    cf = tiny_decider.probabilities({"model": "m", "state": "N/A", "questions": {
        "urgent": QUESTIONS["urgent"].model_dump(exclude_none=True)}})
    resp = calibrated.decide(STATE, QUESTIONS)
    expected_team = calibrate(raw["team"], 2.5)
    np.testing.assert_allclose(list(resp.answers["team"].probabilities.values()), expected_team, atol=TOL)
    assert resp.answers["urgent"].noul == pytest.approx(calibrate(raw["urgent"], 0.5, cf["urgent"])[0], abs=TOL)
    assert "T=2.5" in resp.answers["team"].calibration
    assert "contextual" in resp.answers["urgent"].calibration
    assert resp.answers["sev"].calibration is None  # score not in the file: untouched
    np.testing.assert_allclose(list(resp.answers["sev"].probabilities.values()), raw["sev"], atol=TOL)
    assert "calibration" not in resp.model_dump_json()  # the wire format stays strict

    # p_cf depends on the question only: a second state costs no content-free engine call, and
    # the memoized p_cf gives the same calibrated answer as a fresh computation would.
    calls = calibrated.engine.stats.calls
    other = calibrated.decide("Please cancel my subscription.", {"urgent": QUESTIONS["urgent"]})
    assert calibrated.engine.stats.calls == calls + 1
    raw2 = tiny_decider.probabilities({"model": "m", "state": "Please cancel my subscription.",
                                       "questions": {"urgent": QUESTIONS["urgent"].model_dump(exclude_none=True)}})
    assert other.answers["urgent"].noul == pytest.approx(calibrate(raw2["urgent"], 0.5, cf["urgent"])[0], abs=TOL)


@pytest.mark.parametrize("kind", ["typesafe", "bonsai", "entropy"])
def test_confidence_formula_is_selectable(tiny_model_dir, kind):
    d = Decider.from_dir(tiny_model_dir, threads=THREADS, confidence=kind)
    resp = d.decide(STATE, {"team": QUESTIONS["team"]})
    p = np.array(list(resp.answers["team"].probabilities.values()))
    assert resp.answers["team"].confidence == pytest.approx(confidence(p, kind), abs=1e-12)


def test_run_many_equals_one_by_one(tiny_decider):
    reqs = [{"model": "m", "state": s, "questions": {k: v.model_dump(exclude_none=True) for k, v in QUESTIONS.items()}}
            for s in [STATE, "Please cancel my subscription.", STATE]]
    together = tiny_decider.run_many(reqs)
    for req, resp in zip(reqs, together):
        alone = tiny_decider.run(req)
        for name in QUESTIONS:
            a, b = alone.answers[name].model_dump(), resp.answers[name].model_dump()
            for key in a:
                if isinstance(a[key], dict):
                    for k in a[key]:
                        if isinstance(a[key][k], float):
                            assert b[key][k] == pytest.approx(a[key][k], abs=1e-5)
                elif isinstance(a[key], float):
                    assert b[key] == pytest.approx(a[key], abs=1e-5)
                else:
                    assert a[key] == b[key]
        assert alone.usage == resp.usage
