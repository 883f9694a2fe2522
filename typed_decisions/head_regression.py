"""Fitting a head (``fitted.py``) on labelled rows' features: standardize, project, regress.

Given n rows with the hidden state h (n, H) at the answer position, the zero-shot probabilities
p (n, C) in class order and the gold class y (n,):

    μ, σ    = mean and standard deviation of h per dimension (σ floored at 1e-6 · max σ)
    z       = (h − μ) / σ
    V       = the top d right singular vectors of z (d = min(components, n − 1, H)): PCA
    x       = [clip(log p), z Vᵀ]                               (n, C + d)
    (A, b)  = L2-regularised multinomial logistic regression on (x, y), class weights
              n / (C · n_c) ("balanced") so a rare class is not ignored; its inverse strength
              chosen among L2_GRID by the mean held-out log-loss of stratified k-fold CV
              (k = min(folds, rows of the rarest class); a row read under several option orders
              (``groups``) counts once and its reads stay in one fold)
    W       = [A_logp, A_z V]                                   the projection folded in: (C, C + H)
    (W, b) /= T                              (calibrate="temperature": T minimises the log-loss of the
                                              chosen regularisation's held-out CV predictions; a
                                              regression's probabilities can be sharp or flat)
    b      += log π − log π_balanced         (prior="rows": π = the rows' class frequencies, which
                                              balanced weights had flattened; or π given: the class
                                              frequencies where the head will answer, when the rows
                                              were sampled otherwise, e.g. k per class)

so a served head is ``softmax(W [clip(log p), z] + b)`` (``FittedHead.probabilities``) with no PCA
at run time. Two classes: scikit-learn fits one logit a = wᵀx + c; it is written as the two rows
(+w/2, −w/2), (+c/2, −c/2), whose softmax is exactly the sigmoid of a.

The regression is scikit-learn's ``LogisticRegression`` (lbfgs): an optional dependency
(``pip install 'typed-decisions-runtime[fit]'``), imported only here and only when fitting;
serving a head needs numpy alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .errors import InvalidRequestError
from .fitted import LOG_FLOOR

__all__ = ["HeadFit", "L2_GRID", "SKLEARN_HINT", "fit_head", "fit_temperature", "prior_shift", "design",
           "check_rows_per_class", "paired_interval"]

L2_GRID = tuple(float(c) for c in np.logspace(-4, 2, 7))  # inverse regularisation strengths tried
SKLEARN_HINT = "fitting a head needs scikit-learn: pip install 'typed-decisions-runtime[fit]'"
MIN_ROWS_PER_CLASS = 2


@dataclass(frozen=True)
class HeadFit:
    """The arrays of a fitted head and how the fit went (``FittedHead`` and ``FitReport`` fields)."""

    mean: np.ndarray       # (H,)
    scale: np.ndarray      # (H,)
    weights: np.ndarray    # (C, C + H)
    bias: np.ndarray       # (C,)
    components: int
    l2: float
    folds: int
    temperature: float
    cv_accuracy: float | None
    cv_nll: float | None
    zero_shot_accuracy: float
    seconds: float
    cv_gain: tuple[float, float, float] | None = None  # held-out − zero-shot accuracy, same rows: (mean, 95 % low, high)


def check_rows_per_class(gold: Sequence[int], classes: Sequence[str], *, field: str = "rows") -> None:
    """Refuse fewer than two rows of any class, naming the classes (InvalidRequestError)."""
    counts = np.bincount(np.asarray(gold, dtype=np.int64), minlength=len(classes))
    short = [f"{c!r} ({int(k)})" for c, k in zip(classes, counts) if k < MIN_ROWS_PER_CLASS]
    if short:
        raise InvalidRequestError(
            f"a fitted head needs at least {MIN_ROWS_PER_CLASS} labelled rows of every option; too few for "
            f"{', '.join(short)}", (field,))


def _sklearn():
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold
    except ImportError as e:
        raise ImportError(SKLEARN_HINT) from e
    return LogisticRegression, StratifiedKFold, StratifiedGroupKFold


def _regression(x: np.ndarray, y: np.ndarray, c: float, class_weight: str | None, seed: int, tol: float):
    LogisticRegression, _, _ = _sklearn()
    model = LogisticRegression(C=c, class_weight=class_weight, max_iter=10000, tol=tol, random_state=seed)
    return model.fit(x, y)


def _log_loss(probs: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(probs[np.arange(y.size), y], 1e-300, None))))


def design(hidden: np.ndarray, probs: np.ndarray, components: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """μ, σ, V (d, H) and the regression's inputs x = [clip(log p), ((h − μ)/σ) Vᵀ] (n, C + d)."""
    n = hidden.shape[0]
    mean = hidden.mean(axis=0)
    sd = hidden.std(axis=0)
    scale = np.maximum(sd, 1e-6 * max(float(sd.max()), 1e-30))
    z = (hidden - mean) / scale                                               # (n, H)
    d = max(1, min(components, n - 1, hidden.shape[1]))
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    v = vt[:d]                                                                # (d, H)
    with np.errstate(divide="ignore"):
        lp = np.maximum(np.log(probs), LOG_FLOOR)                             # (n, C)
    return mean, scale, v, np.concatenate([lp, z @ v.T], axis=1)


def prior_shift(prior: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """log π − log π_trained: what moves the bias of a head fitted under the class frequencies
    ``trained`` to answer under ``prior`` (both normalised here).

    >>> [round(float(x), 6) for x in prior_shift(np.array([2.0, 1.0, 1.0]), np.ones(3))]
    [0.405465, -0.287682, -0.287682]
    """
    return np.log(prior / prior.sum()) - np.log(trained / trained.sum())


def fit_temperature(held: np.ndarray, y: np.ndarray, shift: np.ndarray) -> float:
    """T > 0 minimising −mean log softmax(log held / T + shift)[y]: held-out probabilities of the
    regression (their logits up to a constant), ``shift`` the prior correction the served head adds.

    >>> rng = np.random.default_rng(0); logits = rng.normal(size=(4000, 3)) * 3
    >>> y = np.array([rng.choice(3, p=q) for q in np.exp(logits / 2) / np.exp(logits / 2).sum(1, keepdims=True)])
    >>> t = fit_temperature(np.exp(logits) / np.exp(logits).sum(1, keepdims=True), y, np.zeros(3))  # sharp by 2x
    >>> 1.8 < t < 2.2, fit_temperature(np.full((4, 2), 0.5), np.array([0, 1, 0, 1]), np.zeros(2)) > 0
    (True, True)
    """
    from scipy.optimize import minimize_scalar

    with np.errstate(divide="ignore"):
        lh = np.maximum(np.log(held), LOG_FLOOR)

    def loss(log_t: float) -> float:
        z = lh / np.exp(log_t) + shift
        z = z - z.max(axis=1, keepdims=True)
        return float(-np.mean(z[np.arange(y.size), y] - np.log(np.exp(z).sum(axis=1))))

    return float(np.exp(minimize_scalar(loss, bounds=(-3.0, 3.0), method="bounded").x))


def paired_interval(diff: Sequence[float], groups: Sequence[int] | None = None, *, draws: int = 1000,
                    seed: int = 0) -> tuple[float, float, float]:
    """The mean of per-row differences with its 95 % percentile-bootstrap interval. Rows that share a
    group (one row read under several option orders) are resampled together, so a row counted R
    times does not narrow the interval R-fold: each draw takes groups with replacement and averages
    the rows they hold."""
    d = np.asarray(diff, dtype=np.float64)
    g = np.arange(d.size) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
    n_groups = int(g.max()) + 1
    sums, sizes = np.bincount(g, weights=d, minlength=n_groups), np.bincount(g, minlength=n_groups)
    pick = np.random.default_rng(seed).integers(0, n_groups, size=(draws, n_groups))
    means = sums[pick].sum(axis=1) / sizes[pick].sum(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def fit_head(hidden: np.ndarray, probs: np.ndarray, gold: Sequence[int], *, components: int = 256,
             class_weight: Literal["balanced", "none"] = "balanced",
             prior: Literal["rows", "uniform"] | Sequence[float] = "rows",
             folds: int = 5, l2_grid: Sequence[float] = L2_GRID, groups: Sequence[int] | None = None,
             seed: int = 0, tol: float = 1e-6, calibrate: Literal["none", "temperature"] = "none") -> HeadFit:
    """Fit the head of the module docstring. ``hidden`` (n, H), ``probs`` (n, C) zero-shot
    probabilities in class order, ``gold`` (n,) class indices; every class needs >= 2 rows.
    ``groups``: rows sharing a group (one row read under several option orders) share a CV fold;
    ``tol``: lbfgs's stopping tolerance; ``calibrate``: divide the logits by the temperature that
    fits the held-out CV predictions best (1 without CV)."""
    t0 = time.perf_counter()
    h = np.asarray(hidden, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(gold, dtype=np.int64)
    n, n_classes = p.shape
    if h.ndim != 2 or h.shape[0] != n or y.shape != (n,):
        raise ValueError(f"hidden (n, H), probs (n, C) and gold (n,) must agree: {h.shape}, {p.shape}, {y.shape}")
    check_rows_per_class(y, [str(i) for i in range(n_classes)])
    cw = None if class_weight == "none" else "balanced"

    mean, scale, v, x = design(h, p, components)
    # the regularisation, by held-out log-loss
    counts = np.bincount(y, minlength=n_classes)
    # a fold needs a row of every class; rows read under several option orders count once (their group)
    units = counts if groups is None else np.array(
        [np.unique(np.asarray(groups)[y == c]).size for c in range(n_classes)])
    k = int(min(folds, units.min()))
    best_c, cv_acc, cv_nll, cv_gain = float(l2_grid[len(l2_grid) // 2]), None, None, None
    held_p = held_y = None  # the chosen regularisation's held-out predictions and their gold classes
    if k >= 2 and (len(l2_grid) > 1 or calibrate == "temperature"):
        _, StratifiedKFold, StratifiedGroupKFold = _sklearn()
        if groups is not None:
            splits = list(StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed).split(x, y, groups))
        else:
            splits = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(x, y))
        scores = []
        for c in l2_grid:
            held = np.zeros((n, n_classes))
            for train, test in splits:
                if np.unique(y[train]).size < n_classes:  # a fold without some class cannot score it
                    continue
                held[test] = _regression(x[train], y[train], c, cw, seed, tol).predict_proba(x[test])
            seen = held.sum(axis=1) > 0
            scores.append((_log_loss(held[seen], y[seen]), float(np.mean(held[seen].argmax(1) == y[seen])), c,
                           seen, held))
        cv_nll, cv_acc, best_c, seen, held = min(scores, key=lambda r: r[:3])
        held_p, held_y = held[seen], y[seen]
        # is the head ahead of the zero-shot reading on these rows? paired, held out, per row (groups together)
        gain = (held_p.argmax(1) == held_y).astype(np.float64) - (p[seen].argmax(1) == held_y)
        cv_gain = paired_interval(gain, None if groups is None else np.asarray(groups)[seen], seed=seed)

    model = _regression(x, y, best_c, cw, seed, tol)
    coef, intercept = model.coef_, model.intercept_
    if n_classes == 2:  # one logit a for class 1 → rows (−a/2, +a/2): softmax = sigmoid(a)
        coef = np.vstack([-coef[0] / 2, coef[0] / 2])
        intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
    weights = np.concatenate([coef[:, :n_classes], coef[:, n_classes:] @ v], axis=1)   # (C, C + H)
    bias = np.array(intercept, dtype=np.float64)
    temperature = 1.0
    trained = np.ones(n_classes) if cw is not None else counts.astype(np.float64)  # the frequencies fitted under
    if calibrate == "temperature" and held_p is not None:
        temperature = fit_temperature(held_p, held_y, prior_shift(counts.astype(np.float64), trained))
        weights, bias = weights / temperature, bias / temperature
    if not isinstance(prior, str):
        pi = np.asarray(prior, dtype=np.float64)
        if pi.shape != (n_classes,) or np.any(pi <= 0):
            raise ValueError(f"prior: {n_classes} class frequencies > 0, got {list(pi)}")
        bias = bias + prior_shift(pi, trained)
    elif cw is not None and prior == "rows":
        bias = bias + prior_shift(counts.astype(np.float64), trained)
    return HeadFit(mean=mean, scale=scale, weights=weights, bias=bias, components=v.shape[0], l2=best_c, folds=k if k >= 2 else 0,
                   temperature=temperature,
                   cv_accuracy=cv_acc, cv_nll=cv_nll, zero_shot_accuracy=float(np.mean(p.argmax(1) == y)),
                   seconds=time.perf_counter() - t0, cv_gain=cv_gain)
