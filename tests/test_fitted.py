"""The fitted readout's maths and rules (fitted.py, head_regression.py), without a model: the head's
probabilities against a hand computation, the fit's folded projection against scikit-learn's own
pipeline (StandardScaler → PCA → LogisticRegression), the array encoding, the refusal rules and the
preset rules. The engine side (hidden states, invariance, the server) is tests/test_fitted_engine.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from typed_decisions.errors import InvalidRequestError
from typed_decisions.presets import DeciderSettings, Preset, select_head, with_head
from typed_decisions.head_regression import check_rows_per_class, fit_head, paired_interval
from typed_decisions.fitted import LOG_FLOOR, FittedHead, decode_array, encode_array
from typed_decisions.heads import row_answer

sklearn = pytest.importorskip("sklearn", reason="the [fit] extra: pip install 'typed-decisions-runtime[fit]'")


def _head(c=3, h=5, seed=0, **kw):
    rng = np.random.default_rng(seed)
    fields = dict(question_type="choice", classes=[f"o{i}" for i in range(c)], model="m", export_sha256="e" * 64,
                  prompt_sha256="p" * 64, rows_sha256="r" * 64, labels="names", mean=rng.normal(size=h),
                  scale=rng.uniform(0.5, 2, size=h), weights=rng.normal(size=(c, c + h)), bias=rng.normal(size=c))
    fields.update(kw)
    return FittedHead(**fields)


def test_head_probabilities_are_the_hand_computed_softmax():
    head = _head()
    rng = np.random.default_rng(1)
    hidden, zero = rng.normal(size=5), np.array([0.7, 0.3, 0.0])   # a zero probability: log clipped, not -inf
    x = [max(math.log(p), LOG_FLOOR) if p > 0 else LOG_FLOOR for p in zero]
    x += [(hv - m) / s for hv, m, s in zip(hidden, head.mean, head.scale)]
    logits = [sum(w * xi for w, xi in zip(row, x)) + b for row, b in zip(head.weights, head.bias)]
    top = max(logits)
    expected = [math.exp(z - top) / sum(math.exp(v - top) for v in logits) for z in logits]
    got = head.probabilities(hidden, zero)
    assert np.max(np.abs(got - expected)) < 1e-12
    # many rows at once: the same numbers per row
    many = head.probabilities(np.stack([hidden, hidden]), np.stack([zero, zero]))
    assert np.max(np.abs(many - got)) < 1e-15


def test_arrays_round_trip_exactly_and_refuse_bad_input():
    a = np.random.default_rng(2).normal(size=(3, 4))
    assert np.array_equal(decode_array(json.loads(json.dumps(encode_array(a)))), a)
    with pytest.raises(ValueError, match="do not hold"):
        decode_array({"shape": [5], "float64": encode_array(np.zeros(4))["float64"]})
    with pytest.raises(ValueError, match="NaN"):
        decode_array(encode_array(np.array([np.nan])))
    head = _head()
    again = FittedHead.model_validate_json(head.model_dump_json())
    assert again.id == head.id and np.array_equal(again.weights, head.weights)
    with pytest.raises(ValueError, match="weights: shape"):
        _head(weights=np.zeros((3, 7)))
    with pytest.raises(ValueError, match="scale"):
        _head(scale=np.zeros(5))


def _data(n_per_class=12, c=3, h=20, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(c), n_per_class)
    centers = rng.normal(scale=2.0, size=(c, h))
    hidden = centers[y] + rng.normal(size=(y.size, h)) * rng.uniform(0.2, 5.0, size=h)  # unequal scales
    probs = rng.dirichlet(np.ones(c), size=y.size)
    return hidden, probs, y


@pytest.mark.parametrize("c, components", [(3, 8), (2, 8), (3, 100)])
def test_fit_folds_the_projection_as_scikit_learn_s_pipeline_computes_it(c, components):
    """Oracle: scikit-learn's StandardScaler → PCA → LogisticRegression on [clip(log p), PCA(z)],
    fitted with the C fit_head chose, predicts what the folded head computes from raw h."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    hidden, probs, y = _data(c=c)
    fit = fit_head(hidden, probs, y, components=components, prior="uniform", tol=1e-12, l2_grid=(0.3,))
    head = _head(c=c, h=hidden.shape[1], mean=fit.mean, scale=fit.scale, weights=fit.weights, bias=fit.bias)
    z = StandardScaler().fit_transform(hidden)
    pca = PCA(n_components=fit.components, svd_solver="full").fit(z)
    x = np.concatenate([np.maximum(np.log(probs), LOG_FLOOR), pca.transform(z)], axis=1)
    ref = LogisticRegression(C=fit.l2, class_weight="balanced", tol=1e-12, max_iter=100000).fit(x, y)
    rng = np.random.default_rng(5)
    new_h, new_p = hidden + rng.normal(size=hidden.shape), rng.dirichlet(np.ones(c), size=y.size)
    new_x = np.concatenate([np.maximum(np.log(new_p), LOG_FLOOR), pca.transform((new_h - fit.mean) / fit.scale)], axis=1)
    assert np.max(np.abs(head.probabilities(new_h, new_p) - ref.predict_proba(new_x))) < 1e-6
    assert fit.components == min(components, y.size - 1, hidden.shape[1])


def test_prior_rows_puts_the_rows_class_frequencies_back():
    hidden, probs, y = _data()
    keep = np.concatenate([np.flatnonzero(y == 0), np.flatnonzero(y == 1)[:4], np.flatnonzero(y == 2)[:4]])
    args = (hidden[keep], probs[keep], y[keep])
    uniform = fit_head(*args, prior="uniform", l2_grid=(1.0,))
    rows = fit_head(*args, prior="rows", l2_grid=(1.0,))
    counts = np.bincount(y[keep])
    shift = np.log(counts / counts.sum()) - np.log(1 / 3)
    assert np.allclose(rows.bias - uniform.bias, shift, atol=1e-12)
    assert np.array_equal(rows.weights, uniform.weights)


def test_a_given_prior_replaces_the_balanced_one():
    hidden, probs, y = _data()
    uniform = fit_head(hidden, probs, y, prior="uniform", l2_grid=(1.0,))
    given = fit_head(hidden, probs, y, prior=[6.0, 3.0, 1.0], l2_grid=(1.0,))
    assert np.allclose(given.bias - uniform.bias, np.log([0.6, 0.3, 0.1]) - np.log(1 / 3), atol=1e-12)
    with pytest.raises(ValueError, match="3 class frequencies > 0"):
        fit_head(hidden, probs, y, prior=[1.0, 0.0, 1.0], l2_grid=(1.0,))


def test_cv_picks_the_regularisation_by_held_out_log_loss_and_reports_it():
    hidden, probs, y = _data(n_per_class=20)
    fit = fit_head(hidden, probs, y)
    assert fit.folds == 5 and fit.cv_nll is not None and 0 <= fit.cv_accuracy <= 1
    # separable clusters: the held-out accuracy beats the random zero-shot probabilities
    assert fit.cv_accuracy > fit.zero_shot_accuracy + 0.2


def test_the_cv_gain_is_the_held_out_minus_the_zero_shot_accuracy_with_a_paired_interval():
    hidden, probs, y = _data(n_per_class=20)
    fit = fit_head(hidden, probs, y)
    gain, low, high = fit.cv_gain
    assert gain == pytest.approx(fit.cv_accuracy - fit.zero_shot_accuracy, abs=1e-12)
    assert 0 < low <= gain <= high  # separable clusters against random probabilities: ahead beyond noise
    assert fit_head(hidden, probs, y, l2_grid=(1.0,)).cv_gain is None  # no CV, nothing to report


def test_folds_count_a_row_read_under_several_orders_once():
    """2 rows of a class, each read under 3 option orders: 2 folds (a row's reads stay in one fold,
    so a third fold would have no row of that class to hold out), not min(5, 6 reads) = 5."""
    hidden, probs, y = _data(n_per_class=6)
    keep = np.concatenate([np.flatnonzero(y == 0)[:2], np.flatnonzero(y != 0)])
    hidden, probs, y = hidden[keep], probs[keep], y[keep]
    reads = fit_head(np.repeat(hidden, 3, axis=0), np.repeat(probs, 3, axis=0), np.repeat(y, 3),
                     groups=np.repeat(np.arange(y.size), 3))
    assert reads.folds == 2
    assert fit_head(hidden, probs, y).folds == 2
    assert fit_head(np.repeat(hidden, 3, axis=0), np.repeat(probs, 3, axis=0), np.repeat(y, 3)).folds == 5


def test_the_paired_interval_resamples_groups_whole():
    """Oracle by hand: two groups of three rows, one all +1, one all -1. Resampling groups whole, a
    draw's mean is -1, 0 or +1, never a third; resampling rows it is a sixth-step value."""
    diff = np.array([1.0, 1, 1, -1, -1, -1])
    assert paired_interval(diff)[0] == 0.0
    by_group = paired_interval(diff, [0, 0, 0, 1, 1, 1], draws=4000)
    assert by_group == (0.0, -1.0, 1.0)
    by_row = paired_interval(diff, draws=4000)
    assert -1.0 < by_row[1] < 0 < by_row[2] < 1.0
    assert paired_interval(np.full(7, 0.25)) == (0.25, 0.25, 0.25)
    # a row read under 3 option orders, each copy alike: grouped, exactly the interval of the rows once;
    # counted as 3 independent rows it would be about 1/sqrt(3) as wide
    d = np.random.default_rng(1).choice([-1.0, 0.0, 1.0], size=40)
    once, grouped = paired_interval(d), paired_interval(np.repeat(d, 3), np.repeat(np.arange(40), 3))
    assert grouped == pytest.approx(once, abs=1e-12)
    tripled = paired_interval(np.repeat(d, 3))
    assert tripled[2] - tripled[1] < 0.8 * (once[2] - once[1])


def test_temperature_divides_the_logits_by_the_t_that_fits_the_held_out_predictions():
    """Oracle: the held-out CV predictions of the chosen C, recomputed here with scikit-learn's own
    StratifiedKFold (same seed), give the temperature by a grid search over T; the calibrated head
    is the uncalibrated one with weights and bias divided by T (prior shift added after)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    from typed_decisions.head_regression import design

    hidden, probs, y = _data(n_per_class=20, h=3, seed=3)  # overlapping classes: an interior T
    plain = fit_head(hidden, probs, y, prior="uniform", l2_grid=(10.0,), folds=5, tol=1e-10)
    cal = fit_head(hidden, probs, y, prior="uniform", l2_grid=(10.0,), folds=5, tol=1e-10, calibrate="temperature")
    assert plain.temperature == 1.0 and cal.temperature != 1.0
    assert np.allclose(cal.weights, plain.weights / cal.temperature, atol=1e-12)
    assert np.allclose(cal.bias, plain.bias / cal.temperature, atol=1e-12)
    _, _, _, x = design(hidden, probs, 256)
    held = np.zeros((y.size, 3))
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(x, y):
        held[te] = LogisticRegression(C=10.0, class_weight="balanced", tol=1e-10, max_iter=10000).fit(
            x[tr], y[tr]).predict_proba(x[te])
    grid = np.exp(np.linspace(-3, 3, 6001))
    nll = [-np.mean(np.log(np.exp(np.log(held) / t)[np.arange(y.size), y] / np.exp(np.log(held) / t).sum(1)))
           for t in grid]
    assert abs(cal.temperature - grid[int(np.argmin(nll))]) < 2e-3 * cal.temperature


def test_too_few_rows_of_a_class_are_refused_by_name():
    with pytest.raises(InvalidRequestError, match=r"'b' \(1\)") as e:
        check_rows_per_class([0, 0, 1, 2, 2], ["a", "b", "c"])
    assert e.value.loc == ("rows",)
    check_rows_per_class([0, 0, 1, 1], ["a", "b"])


def test_a_row_without_a_label_or_with_an_unknown_one_is_refused_by_index():
    classes = ["billing", "tech"]
    assert row_answer({"state": "x", "answer": "tech"}, 0, classes) == 1
    with pytest.raises(InvalidRequestError, match=r"rows\[3\] has no 'answer'") as e:
        row_answer({"state": "x"}, 3, classes)
    assert e.value.loc == ("rows", 3, "answer")
    with pytest.raises(InvalidRequestError, match=r"rows\[4\].answer: 'legal' is not an option"):
        row_answer({"state": "x", "answer": "legal"}, 4, classes)
    assert row_answer({"state": "x", "answer": True}, 0, ["yes", "no"]) == 0


def test_refusal_names_what_differs():
    head = _head()
    ok = dict(model="m", export_sha256="e" * 64, prompt_sha256="p" * 64, labels="names", debias="none",
              wording="default")
    assert head.refusal(**ok) is None
    assert "fitted for model m" in head.refusal(**{**ok, "model": "other"})
    assert "another export" in head.refusal(**{**ok, "export_sha256": "f" * 64})
    assert "another prompt" in head.refusal(**{**ok, "prompt_sha256": "q" * 64})
    assert "letters/none/default" in head.refusal(**{**ok, "labels": "letters"})
    assert "terse" in head.refusal(**{**ok, "wording": "terse"})
    assert head.order(["o2", "o0", "o1"]) == [1, 2, 0]
    with pytest.raises(ValueError, match="not the head's classes"):
        head.order(["o0", "o1", "x"])


CHOICE = {"name": "team", "type": "choice", "instructions": "Which team?",
          "options": [{"name": "o0"}, {"name": "o1"}, {"name": "o2"}]}


def test_a_preset_holds_heads_for_its_own_question_only():
    data = {"name": "p", "version": 1, "question": CHOICE}
    preset = Preset.model_validate(with_head(data, _head()))
    assert preset.fitted["m"].id == _head().id
    with pytest.raises(ValueError, match=r"answers a choice question with options \['a', 'b', 'c'\]"):
        Preset.model_validate({**data, "fitted": {"m": _head(classes=["a", "b", "c"]).model_dump(mode="json")}})
    with pytest.raises(ValueError, match="fitted for model 'm'"):
        Preset.model_validate({**data, "fitted": {"other": _head().model_dump(mode="json")}})


def test_select_head_refuses_a_model_without_a_head_and_obeys_params():
    preset = Preset.model_validate(with_head({"name": "p", "version": 1, "question": CHOICE}, _head()))
    head, note = select_head(preset, DeciderSettings("m"))
    assert head is not None and "fitted head" in note
    with pytest.raises(InvalidRequestError, match="not for other") as e:
        select_head(preset, DeciderSettings("other"))
    assert e.value.loc == ("params", "fitted")
    assert select_head(preset, DeciderSettings("other"), wanted=False)[0] is None
    plain = Preset.model_validate({"name": "p", "version": 1, "question": CHOICE})
    assert select_head(plain, DeciderSettings("m")) == (None, "")
