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


def free_head(*args, **kw):
    """The free regression (L2 toward 0, balanced weights): what scikit-learn computes as the oracle."""
    return fit_head(*args, method="free", **kw)


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
    fit = free_head(hidden, probs, y, components=components, prior="uniform", tol=1e-12, l2_grid=(0.3,))
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
    uniform = free_head(*args, prior="uniform", l2_grid=(1.0,))
    rows = free_head(*args, prior="rows", l2_grid=(1.0,))
    counts = np.bincount(y[keep])
    shift = np.log(counts / counts.sum()) - np.log(1 / 3)
    assert np.allclose(rows.bias - uniform.bias, shift, atol=1e-12)
    assert np.array_equal(rows.weights, uniform.weights)


def test_a_given_prior_replaces_the_balanced_one():
    hidden, probs, y = _data()
    uniform = free_head(hidden, probs, y, prior="uniform", l2_grid=(1.0,))
    given = free_head(hidden, probs, y, prior=[6.0, 3.0, 1.0], l2_grid=(1.0,))
    assert np.allclose(given.bias - uniform.bias, np.log([0.6, 0.3, 0.1]) - np.log(1 / 3), atol=1e-12)
    with pytest.raises(ValueError, match="3 class frequencies > 0"):
        free_head(hidden, probs, y, prior=[1.0, 0.0, 1.0], l2_grid=(1.0,))


def test_cv_picks_the_regularisation_by_held_out_log_loss_and_reports_it():
    hidden, probs, y = _data(n_per_class=20)
    fit = free_head(hidden, probs, y)
    assert fit.folds == 5 and fit.cv_nll is not None and 0 <= fit.cv_accuracy <= 1
    # separable clusters: the held-out accuracy beats the random zero-shot probabilities
    assert fit.cv_accuracy > fit.zero_shot_accuracy + 0.2


def test_the_cv_gain_is_the_held_out_minus_the_zero_shot_accuracy_with_a_paired_interval():
    hidden, probs, y = _data(n_per_class=20)
    fit = free_head(hidden, probs, y)
    gain, low, high = fit.cv_gain
    assert gain == pytest.approx(fit.cv_accuracy - fit.zero_shot_accuracy, abs=1e-12)
    assert 0 < low <= gain <= high  # separable clusters against random probabilities: ahead beyond noise
    assert free_head(hidden, probs, y, l2_grid=(1.0,)).cv_gain is None  # no CV, nothing to report


def test_folds_count_a_row_read_under_several_orders_once():
    """2 rows of a class, each read under 3 option orders: 2 folds (a row's reads stay in one fold,
    so a third fold would have no row of that class to hold out), not min(5, 6 reads) = 5."""
    hidden, probs, y = _data(n_per_class=6)
    keep = np.concatenate([np.flatnonzero(y == 0)[:2], np.flatnonzero(y != 0)])
    hidden, probs, y = hidden[keep], probs[keep], y[keep]
    reads = free_head(np.repeat(hidden, 3, axis=0), np.repeat(probs, 3, axis=0), np.repeat(y, 3),
                     groups=np.repeat(np.arange(y.size), 3))
    assert reads.folds == 2
    assert free_head(hidden, probs, y).folds == 2
    assert free_head(np.repeat(hidden, 3, axis=0), np.repeat(probs, 3, axis=0), np.repeat(y, 3)).folds == 5


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
    plain = free_head(hidden, probs, y, prior="uniform", l2_grid=(10.0,), folds=5, tol=1e-10)
    cal = free_head(hidden, probs, y, prior="uniform", l2_grid=(10.0,), folds=5, tol=1e-10, calibrate="temperature")
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


# -- the anchored head (head_regression._fit_anchored): from the zero-shot reading, L2 toward it


def _skewed(seed=0, n=(14, 6, 4), h=12, signal=1.5):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(len(n)), n)
    hidden = rng.normal(size=(y.size, h)) + np.eye(len(n), h)[y] * signal
    probs = rng.dirichlet(np.ones(len(n)), size=y.size)
    return hidden, probs, y


@pytest.mark.parametrize("prior", ["rows", "uniform", [1.0, 2.0, 5.0]])
def test_the_anchored_head_is_the_minimum_of_its_weighted_loss(prior):
    """Oracle: the loss written again in torch (not the solver's own gradient): at the fitted
    [D, A, b] its autograd gradient vanishes (ρ ≠ 1 here, so the two penalties are told apart), so it is the unique minimum of the strictly convex
    loss, weighted by π(y)/f(y) for the prior; and the folded head computes those logits."""
    torch = pytest.importorskip("torch")
    from typed_decisions.head_anchored import CALIBRATION_RHO
    from typed_decisions.head_regression import design

    hidden, probs, y = _skewed()
    lam = 0.05
    fit = fit_head(hidden, probs, y, components=6, prior=prior, folds=1, l2_grid=(lam,), tol=1e-10)
    assert fit.method == "anchored" and fit.l2 == lam and fit.folds == 0
    _, _, v, x = design(hidden, probs, 6)
    c = 3
    d = torch.tensor(fit.weights[:, :c] - np.eye(c), requires_grad=True)
    a = torch.tensor(fit.weights[:, c:] @ v.T, requires_grad=True)   # A V Vᵀ = A: V has orthonormal rows
    b = torch.tensor(fit.bias, requires_grad=True)
    counts = np.bincount(y) / y.size
    if isinstance(prior, str):
        pi = counts if prior == "rows" else np.full(3, 1 / 3)
    else:
        pi = np.array(prior) / np.sum(prior)
    w = torch.tensor(pi[y] / counts[y])
    lp, xs = torch.tensor(x[:, :c]), torch.tensor(x[:, c:])
    logits = lp + lp @ d.T + xs @ a.T + b
    ce = torch.nn.functional.cross_entropy(logits, torch.tensor(y), reduction="none")
    rho = CALIBRATION_RHO  # the calibration part (D, b) is held back by rho * lam
    loss = (w * ce).sum() / w.sum() + lam / 2 * ((a ** 2).sum() + rho * ((d ** 2).sum() + (b ** 2).sum()))
    loss.backward()
    grad = max(float(t.grad.abs().max()) for t in (d, a, b))
    assert grad < 1e-6
    head = _head(c=3, h=hidden.shape[1], mean=fit.mean, scale=fit.scale, weights=fit.weights, bias=fit.bias)
    want = torch.softmax(logits, dim=1).detach().numpy()
    assert np.max(np.abs(head.probabilities(hidden, probs) - want)) < 1e-9


def test_with_no_strength_but_no_change_the_anchored_head_is_the_zero_shot_reading():
    hidden, probs, y = _skewed()
    fit = fit_head(hidden, probs, y, l2_grid=())
    assert np.isinf(fit.l2) and fit.folds == 4  # the rarest class has 4 rows
    assert np.array_equal(fit.weights[:, :3], np.eye(3)) and not fit.weights[:, 3:].any() and not fit.bias.any()
    head = _head(c=3, h=hidden.shape[1], mean=fit.mean, scale=fit.scale, weights=fit.weights, bias=fit.bias)
    assert np.max(np.abs(head.probabilities(hidden, probs) - probs)) < 1e-12
    assert fit.cv_gain == (0.0, 0.0, 0.0) and fit.cv_nll == fit.zero_shot_cv_nll and not fit.worse_than_zero_shot


def test_rows_that_carry_nothing_leave_the_anchored_head_near_the_zero_shot_reading():
    """A calibrated zero-shot reading (each gold class drawn from its probabilities) and hidden
    states of pure noise: the free head learns noise from scratch; the anchored one stays close."""
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(3) * 0.7, size=48)
    y = np.array([rng.choice(3, p=p) for p in probs])
    hidden = rng.normal(size=(48, 64))
    anchored = fit_head(hidden, probs, y, components=16)
    free = free_head(hidden, probs, y, components=16)
    new_h, new_p = rng.normal(size=(200, 64)), rng.dirichlet(np.ones(3) * 0.7, size=200)
    moved = {}
    for name, fit in (("anchored", anchored), ("free", free)):
        head = _head(c=3, h=64, mean=fit.mean, scale=fit.scale, weights=fit.weights, bias=fit.bias)
        moved[name] = float(np.mean(np.abs(head.probabilities(new_h, new_p) - new_p)))
    assert moved["anchored"] < 0.05 < moved["free"]


def test_the_anchored_head_learns_what_the_zero_shot_reading_misses():
    hidden, probs, y = _data(n_per_class=20)   # separable states, random zero-shot probabilities
    fit = fit_head(hidden, probs, y)
    gain, low, high = fit.cv_gain
    assert np.isfinite(fit.l2) and 0 < low <= gain and not fit.worse_than_zero_shot


def test_a_head_behind_the_zero_shot_reading_by_its_own_cv_is_flagged():
    from typed_decisions.head_regression import HeadFit

    base = dict(mean=np.zeros(1), scale=np.ones(1), weights=np.zeros((2, 3)), bias=np.zeros(2), components=1,
                l2=1.0, folds=5, temperature=1.0, cv_accuracy=0.5, cv_nll=0.6, zero_shot_accuracy=0.6, seconds=0.0)
    assert HeadFit(**base, cv_gain=(-0.2, -0.35, -0.05), zero_shot_cv_nll=0.7).worse_than_zero_shot  # fewer right
    assert HeadFit(**base, cv_gain=(0.0, -0.1, 0.1), zero_shot_cv_nll=0.5).worse_than_zero_shot  # log-loss behind
    assert not HeadFit(**base, cv_gain=(-0.1, -0.3, 0.1), zero_shot_cv_nll=0.7).worse_than_zero_shot  # within noise
    assert not HeadFit(**base, cv_gain=(0.1, -0.1, 0.3), zero_shot_cv_nll=0.7).worse_than_zero_shot
    assert not HeadFit(**base, cv_gain=None).worse_than_zero_shot


def test_row_weights_refuse_a_bad_prior_by_name():
    from typed_decisions.head_anchored import row_weights

    y = np.array([0, 0, 1])
    assert row_weights(y, 2, [1.0, 1.0]).tolist() == pytest.approx([0.75, 0.75, 1.5])
    for bad in ([1.0, 0.0], [1.0], "often"):
        with pytest.raises(ValueError, match="prior"):
            row_weights(y, 2, bad)
