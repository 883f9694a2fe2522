"""typed_decisions.evaluation (run, metrics, spec, fitting): metric plumbing against hand-computed values, risk-coverage on a toy case, the
question spec, calibration fitting on synthetic probabilities, and a small eval / calibrate run on
the tiny real model (SmolLM2-135M: weak, so the assertions are on structure and consistency)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions.calibration import CalibrationFile, TypeCalibration, calibrate
from typed_decisions.errors import InvalidRequestError
from typed_decisions.evaluation import QuestionSpec, calibration_fit, evaluate
from typed_decisions.evaluation.metrics import metrics, reliability_bins, risk_coverage

P = [np.array(p) for p in ([0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2])]
Y = [0, 1, 1, 0]


def test_metrics_hand_computed():
    m = metrics(P, Y, n_bins=10)
    # hits: 1, 0, 1, 1
    assert m["accuracy"] == 0.75
    # preds 0,0,1,0 vs gold 0,1,1,0: F1_0 = 2*2/(4+1+0) = .8, F1_1 = 2/(2+0+1) = 2/3
    assert m["macro_f1"] == pytest.approx((0.8 + 2 / 3) / 2)
    assert m["nll"] == pytest.approx(-(np.log(0.9) + np.log(0.4) + np.log(0.7) + np.log(0.8)) / 4)
    assert m["brier"] == pytest.approx((2 * 0.01 + 2 * 0.36 + 2 * 0.09 + 2 * 0.04) / 4)
    # bins (.8,.9]: {.9} hit 1; (.5,.6]: {.6} hit 0; (.6,.7]: {.7} hit 1; (.7,.8]: {.8} hit 1
    assert m["ece"] == pytest.approx((0.1 + 0.6 + 0.3 + 0.2) / 4)
    assert m["confusion"] == [[2, 0], [1, 1]]
    assert m["mean_confidence"] == pytest.approx(0.75)


def test_reliability_bins_match_ece():
    bins = reliability_bins(P, Y, n_bins=5)
    assert [b["count"] for b in bins] == [0, 0, 1, 2, 1]  # .6 -> (.4,.6]; .7, .8 -> (.6,.8]; .9 -> (.8,1]
    ece = sum(b["count"] / 4 * abs(b["accuracy"] - b["confidence"]) for b in bins if b["count"])
    assert ece == pytest.approx(metrics(P, Y, n_bins=5)["ece"])


def test_risk_coverage_toy():
    rc = risk_coverage(P, Y, [0.0, 0.7, 0.85, 0.95])
    assert [(r["n"], r["coverage"], r["accuracy"]) for r in rc] == [
        (4, 1.0, 0.75), (3, 0.75, 1.0), (1, 0.25, 1.0), (0, 0.0, None)]


def test_score_mae_uses_the_expected_level():
    m = metrics([np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.0, 1.0])], [0, 1], qtype="score")
    assert m["mae"] == pytest.approx((0.5 + 1.0) / 2)


def test_question_spec_wire_format_and_gold():
    spec = QuestionSpec(type="choice", instructions="Team?", options=[
        {"name": "billing", "description": "money"}, {"name": "tech"}], gold_map={"B": "billing"})
    assert spec.question() == {"type": "choice", "instructions": "Team?", "criteria": {"billing": "money", "tech": None}}
    assert list(spec.question(order=[1, 0])["criteria"]) == ["tech", "billing"]
    assert spec.gold_index({"gold": "B"}) == 0 and spec.gold_index({"gold": "tech"}) == 1
    with pytest.raises(InvalidRequestError, match="row 3.*'sales'"):
        spec.gold_index({"gold": "sales"}, 3)
    noul = QuestionSpec(type="noul", instructions="Spam?", options=[{"name": "yes"}, {"name": "no", "description": "ok"}])
    assert noul.question()["criteria"] == {"true": None, "false": "ok"}
    assert noul.gold_index({"gold": True}) == 0
    with pytest.raises(ValueError, match="yes, no"):
        QuestionSpec(type="noul", options=[{"name": "no"}, {"name": "yes"}])
    score = QuestionSpec(type="score", options=[{"name": "low"}, {"name": "mid"}, {"name": "high"}])
    assert score.gold_index({"gold": 2}) == 2 and score.gold_index({"gold": "mid"}) == 1


def test_calibration_fit_recovers_a_temperature_and_a_prior():
    rng = np.random.default_rng(0)
    # true p = softmax(z); the model reports softmax(2 z) times a prior favouring option 0 (x3)
    z = rng.normal(size=(600, 3))
    true = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = [int(rng.choice(3, p=t)) for t in true]
    prior = np.array([3.0, 1.0, 1.0]) / 5
    rep = [calibrate(t * (prior / prior.mean()), 0.5) for t in true]  # sharpened and biased
    cf = calibrate(prior, 0.5)
    fit = calibration_fit(rep[:300], y[:300], rep[300:], y[300:], cf)
    assert fit["best"] == "combined"
    assert fit["variants"]["combined"]["temperature"] == pytest.approx(2.0, rel=0.25)
    v = fit["variants"]
    assert v["combined"]["test"]["nll"] < v["temperature"]["test"]["nll"] < v["none"]["test"]["nll"]


def test_calibration_fit_never_picks_a_variant_that_costs_accuracy():
    """A biased model and a content-free prior that is not its bias: dividing by p_cf (then fitting T)
    gives the lowest NLL on the calibration split but lowers its accuracy. ``best`` must skip it."""
    rng = np.random.default_rng(287)  # found by search: combined wins on NLL by > 0.02, loses > 3 points
    z = rng.normal(size=(200, 3)) * rng.uniform(0.5, 3)
    true = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = [int(rng.choice(3, p=t)) for t in true]
    b = rng.normal(size=3) * rng.uniform(0.2, 2)
    reported = [calibrate(t * np.exp(b) / np.exp(b).sum() * 3, rng.uniform(0.3, 2)) for t in true]
    cf = np.exp(rng.normal(size=3))
    cf /= cf.sum()
    fit = calibration_fit(reported, y, reported, y, cf)
    v = fit["variants"]
    assert v["combined"]["fit"]["nll"] < v["temperature"]["fit"]["nll"] < v["none"]["fit"]["nll"]
    assert v["combined"]["fit"]["accuracy"] < v["none"]["fit"]["accuracy"]
    assert fit["best"] == "temperature"  # the lowest NLL among variants keeping the accuracy


# ---------------------------------------------------------------- the tiny real model

ROWS = [{"text": "I was charged twice, refund me", "label": "billing"},
        {"text": "The app crashes on login", "label": "tech"},
        {"text": "Invoice shows the wrong amount", "label": "billing"},
        {"text": "Server is down since noon", "label": "tech"}]
SPEC = {"name": "team", "type": "choice", "instructions": "Which team should handle this?",
        "options": [{"name": "billing", "description": "payments"}, {"name": "tech", "description": "bugs"}],
        "state_field": "text", "gold_field": "label"}


def test_eval_cli_report_is_consistent(tiny_model_dir, tiny_decider, tmp_path, capsys):
    from typed_decisions.cli import main

    data, spec, out = tmp_path / "tickets.jsonl", tmp_path / "spec.json", tmp_path / "report.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    spec.write_text(json.dumps(SPEC))
    cal = tmp_path / "cal.json"
    CalibrationFile(model=tiny_decider.name, created="2025-01-01T00:00:00Z", content_free_state="N/A",
                    per_type={"choice": TypeCalibration(temperature=2.0, contextual=True)}).save(cal)
    rc = main(["eval", "--model", str(tiny_model_dir), "--data", str(data), "--spec", str(spec), "--split", "all",
               "--threads", str(THREADS), "--permutations", "1", "--calibration", str(cal), "--out", str(out),
               "--plot", str(tmp_path / "rel.png"), "-q"])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["n"] == 4 and rep["split"] == "all"
    assert rep["label_mode"] == "auto" and rep["labels"] == "names"  # the default resolves to names for choice
    assert sum(rep["class_counts"].values()) == 4
    probs = [np.array(i["probabilities"]) for i in rep["items"]]
    gold = [i["gold"] for i in rep["items"]]
    m = rep["metrics"]
    assert m["accuracy"] == pytest.approx(metrics(probs, gold)["accuracy"])
    assert m["nll"] == pytest.approx(metrics(probs, gold)["nll"], abs=1e-5)
    assert np.sum(m["confusion"]) == 4 and sum(b["count"] for b in m["reliability"]) == 4
    assert m["risk_coverage"][0]["coverage"] == 1.0 and m["risk_coverage"][0]["accuracy"] == m["accuracy"]
    # the report's calibrated metrics are those of calibrate(p, T, p_cf)
    cf = np.array(rep["calibration"]["content_free_probabilities"])
    assert rep["calibrated"]["nll"] == pytest.approx(metrics([calibrate(p, 2.0, cf) for p in probs], gold)["nll"],
                                                     abs=1e-5)
    perm = rep["permutation"]
    assert perm["k"] == 1 and 0 <= perm["flip_rate"] <= 1 and 0 <= perm["mean_tv"] <= perm["max_tv"] <= 1
    assert (tmp_path / "rel.png").read_bytes()[:4] == b"\x89PNG"
    assert "acc" in capsys.readouterr().out
    # items are the engine's probabilities, in option order
    state = next(r["text"] for r in ROWS)
    direct = tiny_decider.probabilities({"model": "m", "state": state, "questions": {
        "team": QuestionSpec.model_validate(SPEC).question()}})["team"]
    assert any(np.allclose(p, direct, atol=1e-6) for p in probs)


def test_calibrate_cli_writes_a_file_the_decider_applies(tiny_model_dir, tiny_decider, tmp_path, capsys):
    from typed_decisions.cli import main
    from typed_decisions.decider import Decider

    data, spec, cal = tmp_path / "t.jsonl", tmp_path / "spec.json", tmp_path / "cal.json"
    rows = ROWS + [{"text": f"{r['text']} again", "label": r["label"]} for r in ROWS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec.write_text(json.dumps(SPEC))
    assert main(["calibrate", "--model", str(tiny_model_dir), "--data", str(data), "--spec", str(spec),
                 "--method", "combined", "--out", str(cal), "--report", str(tmp_path / "fit.json"),
                 "--threads", str(THREADS), "-q"]) == 0
    f = CalibrationFile.load(cal)
    tc = f.per_type["choice"]
    assert f.model == tiny_decider.name and tc.contextual and f.content_free_state == "N/A"
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["chosen"] == "combined" and fit["fit_n"] + fit["test_n"] == 8
    assert set(fit["variants"]) == {"none", "temperature", "contextual", "combined"}
    # the Decider applies it and marks the answer
    req = {"model": "m", "state": ROWS[0]["text"], "questions": {"team": QuestionSpec.model_validate(SPEC).question()}}
    raw = tiny_decider.probabilities(req)["team"]
    cf = tiny_decider.probabilities({**req, "state": "N/A"})["team"]
    calibrated = Decider(tiny_decider.artifacts, calibration=cal, threads=THREADS).run(req).answers["team"]
    assert calibrated.calibration and f"T={tc.temperature:g}" in calibrated.calibration
    want = calibrate(raw, tc.temperature, cf)
    assert [calibrated.probabilities["billing"], calibrated.probabilities["tech"]] == pytest.approx(want, abs=1e-6)


def test_evaluate_refuses_empty_rows(tiny_decider):
    with pytest.raises(Exception, match="no rows"):
        evaluate(tiny_decider, QuestionSpec.model_validate(SPEC), [])


def test_eval_label_mass_rows_and_coverage(tiny_model_dir, tiny_decider, tmp_path):
    """``eval --label-mass --debias rotate --labels mixture``: every item carries the mass the
    Decider reads for that row, and the coverage tables are those of metrics.coverage_accuracy."""
    from typed_decisions.cli import main
    from typed_decisions.evaluation.metrics import coverage_accuracy

    data, spec, out = tmp_path / "tickets.jsonl", tmp_path / "spec.json", tmp_path / "report.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    spec.write_text(json.dumps(SPEC))
    assert main(["eval", "--model", str(tiny_model_dir), "--data", str(data), "--spec", str(spec), "--split", "all",
                 "--threads", str(THREADS), "--labels", "mixture", "--debias", "rotate", "--label-mass",
                 "--out", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())
    assert rep["debias"] == "rotate" and rep["labels"] == "mixture"
    q = QuestionSpec.model_validate(SPEC)
    row = q.request(tiny_decider.name, ROWS[1]["text"])
    read = tiny_decider.readouts({**row, "debias": "rotate"}, label_mode="mixture", label_mass=True)["team"]
    item = next(i for i in rep["items"] if i["gold"] == 1 and np.allclose(i["probabilities"], read.probabilities(),
                                                                          atol=1e-6))
    assert item["label_mass"] == pytest.approx(read.mean_label_mass(), rel=1e-9)
    assert len(read.rotations) == 1  # two options: two orders
    masses = [i["label_mass"] for i in rep["items"]]
    hits = [float(np.argmax(i["probabilities"]) == i["gold"]) for i in rep["items"]]
    assert rep["label_mass"]["by_label_mass"] == coverage_accuracy(masses, hits)
    assert rep["label_mass"]["mean"] == pytest.approx(np.mean(masses))


def test_coverage_accuracy_hand_values_and_ties():
    from typed_decisions.evaluation.metrics import coverage_accuracy

    # scores 0.9 > 0.7 > 0.5 = 0.5: coverage 0.75 keeps rows 0, 3 and the first of the tie (row 1)
    rows = coverage_accuracy([0.9, 0.5, 0.5, 0.7], [1, 0, 1, 1], [1.0, 0.75, 0.25])
    assert rows == [{"coverage": 1.0, "n": 4, "accuracy": 0.75}, {"coverage": 0.75, "n": 3, "accuracy": 2 / 3},
                    {"coverage": 0.25, "n": 1, "accuracy": 1.0}]
    with pytest.raises(ValueError):
        coverage_accuracy([0.5], [1, 0])
    with pytest.raises(ValueError):
        coverage_accuracy([0.5], [1], [0.0])


def test_eval_shots_shows_calibration_rows_before_every_test_row(tiny_model_dir, tiny_decider, tmp_path):
    """`eval --shots 2`: two calibration rows (one per class) are the examples of every test row;
    the items equal the Decider's probabilities of the same requests with those examples."""
    from typed_decisions.cli import main
    from typed_decisions.evaluation.datasets import rows_for
    from typed_decisions.spec import shot_rows

    rows = [{"text": f"{t} (ticket {i})", "label": g} for i in range(6) for t, g in
            [("I was charged twice, refund me", "billing"), ("The app crashes on login", "tech")]]
    data, spec, out = tmp_path / "tickets.jsonl", tmp_path / "spec.json", tmp_path / "report.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec.write_text(json.dumps(SPEC))
    assert main(["eval", "--model", str(tiny_model_dir), "--data", str(data), "--spec", str(spec), "--limit", "2",
                 "--shots", "2", "--threads", str(THREADS), "--out", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())
    assert rep["examples"] == 2 and rep["shots"]["k"] == 2 and sorted(rep["shots"]["gold"]) == ["billing", "tech"]
    q = QuestionSpec.model_validate(SPEC).model_copy(update={"state_field": "state", "gold_field": "gold"})
    keyed = [{**r, "state": r["text"], "gold": r["label"]} for r in rows]
    shots = [q.example(r, n) for n, r in enumerate(shot_rows(q, rows_for("tickets", keyed, "calibration"), 2))]
    for item, row in zip(rep["items"], rows_for("tickets", keyed, "test", 2), strict=True):
        want = tiny_decider.probabilities({**q.row_request("m", row), "examples": shots})["team"]
        np.testing.assert_allclose(item["probabilities"], want, atol=1e-5)
