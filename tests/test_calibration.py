"""Calibration maths and the calibration file, against hand-computed values and a grid search."""

import json
import math

import numpy as np
import pydantic
import pytest

from typed_decisions.calibration import CalibrationFile, TypeCalibration, apply_temperature, calibrate, contextual_calibrate
from typed_decisions.evaluation.calibration_fitting import fit_temperature
from typed_decisions.evaluation.metrics import accuracy, brier, ece, macro_f1, nll

# -----------------------------------------------------------------------------
# transforms


def test_temperature_hand_values():
    # T = 2: weights sqrt(p) -> sqrt(.8) : sqrt(.2) = 2 : 1
    np.testing.assert_allclose(apply_temperature([0.8, 0.2], 2.0), [2 / 3, 1 / 3], rtol=1e-14)
    # T = 0.5: weights p^2 -> .64 : .04 = 16 : 1
    np.testing.assert_allclose(apply_temperature([0.8, 0.2], 0.5), [16 / 17, 1 / 17], rtol=1e-14)
    np.testing.assert_allclose(apply_temperature([0.7, 0.2, 0.1], 1.0), [0.7, 0.2, 0.1], rtol=1e-14)
    np.testing.assert_allclose(apply_temperature([0.5, 0.5, 0.0], 3.0), [0.5, 0.5, 0.0])
    assert apply_temperature([0.9, 0.1], 1e6).round(4).tolist() == [0.5, 0.5]


def test_contextual_hand_values():
    # p / p_cf = (.6/.75, .4/.25) = (.8, 1.6) -> (1/3, 2/3)
    np.testing.assert_allclose(contextual_calibrate([0.6, 0.4], [0.75, 0.25]), [1 / 3, 2 / 3], rtol=1e-14)
    # a uniform content-free distribution changes nothing
    np.testing.assert_allclose(contextual_calibrate([0.6, 0.3, 0.1], [1 / 3] * 3), [0.6, 0.3, 0.1], rtol=1e-14)
    # combined: contextual (1/3, 2/3), then T = 0.5 squares -> (1, 4) / 5
    np.testing.assert_allclose(calibrate([0.6, 0.4], 0.5, [0.75, 0.25]), [0.2, 0.8], rtol=1e-14)
    # order matters: temperature first would give (.6^2/.75, .4^2/.25) ∝ (.48, .64) -> different
    assert not np.allclose(calibrate([0.6, 0.4], 0.5, [0.75, 0.25]), [0.48 / 1.12, 0.64 / 1.12])


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda: apply_temperature([0.5, 0.5], 0.0), "temperature"),
        (lambda: apply_temperature([0.5, 0.5], float("inf")), "temperature"),
        (lambda: apply_temperature([0.0, 0.0], 1.0), "not all 0"),
        (lambda: contextual_calibrate([0.5, 0.5], [1.0, 0.0]), "> 0"),
        (lambda: contextual_calibrate([0.5, 0.5], [0.2, 0.3, 0.5]), "3 entries"),
        (lambda: nll([[0.5, 0.5]], [2]), "outside"),
        (lambda: nll([[0.5, 0.5]], []), "equally many"),
        (lambda: ece([[0.5, 0.5]], [0], n_bins=0), "n_bins"),
        (lambda: fit_temperature([[0.5, 0.5]], [0], bounds=(2.0, 1.0)), "bounds"),
    ],
)
def test_invalid(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


# -----------------------------------------------------------------------------
# metrics


def test_nll_brier_accuracy_hand_values():
    probs = [[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]]
    gold = [0, 1, 1]
    assert nll(probs, gold) == pytest.approx((math.log(2) + math.log(4 / 3) + math.log(10)) / 3, rel=1e-14)
    # brier: (.25+.25) + (.0625+.0625) + (.81+.81) = 2.245 -> / 3
    assert brier(probs, gold) == pytest.approx(2.245 / 3, rel=1e-14)
    assert accuracy(probs, gold) == pytest.approx(2 / 3)  # tie -> index 0 (right), .75 right, .9 wrong
    assert nll([[1.0, 0.0]], [1]) == pytest.approx(-math.log(1e-12))  # floored, finite
    # ragged questions (2 and 3 options)
    assert brier([[1.0, 0.0], [0.0, 0.0, 1.0]], [0, 2]) == 0.0


def test_ece_bins():
    # confidences .95 (hit), .95 (miss), .55 (hit), .55 (hit): bins 9 and 5
    probs = [[0.95, 0.05], [0.95, 0.05], [0.55, 0.45], [0.45, 0.55]]
    gold = [0, 1, 0, 1]
    assert ece(probs, gold) == pytest.approx(0.5 * abs(0.5 - 0.95) + 0.5 * abs(1.0 - 0.55), rel=1e-12)
    # one bin: |accuracy - mean confidence| = |.75 - .75| = 0
    assert ece(probs, gold, n_bins=1) == pytest.approx(0.0, abs=1e-15)
    # edges: confidence exactly 0.5 lies in (0.4, 0.5], confidence 0.6 in (0.5, 0.6] -> separate bins
    two = [[0.5, 0.5], [0.6, 0.4]]
    assert ece(two, [0, 1]) == pytest.approx(0.5 * 0.5 + 0.5 * 0.6, rel=1e-12)
    # with 2 bins both lie in (0.5, 1]? no: 0.5 is in (0, 0.5] -> still separate
    assert ece(two, [0, 1], n_bins=2) == pytest.approx(0.5 * 0.5 + 0.5 * 0.6, rel=1e-12)
    # with 1 bin they are pooled: |0.5 - 0.55|
    assert ece(two, [0, 1], n_bins=1) == pytest.approx(0.05, rel=1e-12)


def test_macro_f1_hand_values():
    # class 0: tp 1 fp 1 fn 0 -> 2/3 ; class 1: tp 2 fp 0 fn 1 -> 4/5
    assert macro_f1([0, 0, 1, 1], [0, 1, 1, 1]) == pytest.approx((2 / 3 + 4 / 5) / 2)
    # class 2 only predicted (tp 0, fp 1) counts as 0
    assert macro_f1([0, 2], [0, 1]) == pytest.approx((1.0 + 0.0 + 0.0) / 3)
    assert macro_f1([1, 1, 0], [1, 1, 0]) == 1.0


# -----------------------------------------------------------------------------
# fitting


def _synthetic(true_t=1.0, shown_t=0.5, n=600, k=3, seed=0):
    """Gold labels sampled from softmax(z / true_t); the 'model' reports softmax(z / shown_t)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 2.0
    sm = lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
    true = sm(z / true_t)
    gold = [int(rng.choice(k, p=row)) for row in true]
    return list(sm(z / shown_t)), gold


def test_fit_matches_grid_search_and_recovers_overconfidence():
    probs, gold = _synthetic()
    t = fit_temperature(probs, gold)
    grid = np.exp(np.linspace(math.log(0.05), math.log(20), 201))  # (G,) log-spaced, step 0.03
    logp = np.log(np.stack(probs))  # (N, k)
    z = logp[None] / grid[:, None, None]  # (G, N, k)
    lse = np.log(np.exp(z).sum(-1))  # (G, N); |z| is small here, no max-subtraction needed
    losses = -(z[:, np.arange(len(gold)), gold] - lse).mean(1)  # (G,)
    t_grid = grid[int(np.argmin(losses))]
    assert abs(math.log(t) - math.log(t_grid)) < 0.05
    assert 1.6 < t < 2.5  # reported probabilities were sharpened by 2
    assert nll([apply_temperature(p, t) for p in probs], gold) <= min(losses) + 1e-9
    assert nll([apply_temperature(p, t) for p in probs], gold) < nll(probs, gold)


def test_fit_ragged_and_bounds():
    # perfectly separated data: lower T always helps -> the lower bound
    assert fit_temperature([[0.9, 0.1], [0.2, 0.7, 0.1]], [0, 1]) == pytest.approx(0.05, rel=1e-6)
    # always wrong: flatter always helps -> the upper bound
    assert fit_temperature([[0.9, 0.1], [0.2, 0.7, 0.1]], [1, 0]) == pytest.approx(20.0, rel=1e-6)
    # 9 right of 10 at p = .9: already calibrated
    assert fit_temperature([[0.9, 0.1]] * 10, [0] * 9 + [1]) == pytest.approx(1.0, abs=1e-4)


# -----------------------------------------------------------------------------
# the calibration file


def _file(**kw):
    base = dict(
        model="qwen2.5-coder-1.5b-instruct",
        created="2025-01-01T00:00:00Z",
        per_type={"choice": {"temperature": 1.3, "contextual": True}, "noul": {"temperature": 0.8}},
        content_free_state="N/A",
    )
    base.update(kw)
    return CalibrationFile.model_validate(base)


def test_file_roundtrip(tmp_path):
    f = _file(notes="fitted on 500 tickets")
    path = tmp_path / "calibration.json"
    f.save(path)
    raw = json.loads(path.read_text())
    assert raw["version"] == 1 and raw["per_type"]["choice"] == {"temperature": 1.3, "contextual": True}
    g = CalibrationFile.load(path)
    assert g == f
    assert g.for_type("noul") == TypeCalibration(temperature=0.8, contextual=False)
    assert g.for_type("score") == TypeCalibration()  # absent -> identity


@pytest.mark.parametrize(
    "kw",
    [
        dict(version=2),
        dict(content_free_state=None),  # choice is contextual
        dict(per_type={"ranking": {"temperature": 1.0}}),
        dict(per_type={"choice": {"temperature": 0.0}}),
        dict(per_type={"choice": {"temperature": 1.0, "bias": 0.1}}),
        dict(unknown_field=1),
    ],
)
def test_file_rejects(kw):
    with pytest.raises(pydantic.ValidationError):
        _file(**kw)
