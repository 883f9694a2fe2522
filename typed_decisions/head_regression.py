"""Fitting a head (``fitted.py``) on labelled rows' features: ``fit_head``, and the free regression.

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

That is ``method="free"``: a regression that starts from nothing (L2 toward 0). ``method="anchored"``
(``fit_head``'s default) starts from the zero-shot reading and moves only as far as the rows
justify (``head_anchored.py``), in the same served form. The shared design is ``head_design.py``.

The regression is scikit-learn's ``LogisticRegression`` (lbfgs): an optional dependency
(``pip install 'typed-decisions-runtime[fit]'``), imported only here and only when fitting;
serving a head needs numpy alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .head_anchored import ANCHOR_GRID, fit_anchored
from .head_design import (SKLEARN_HINT, HeadFit, check_rows_per_class, design, fit_temperature, paired_interval,
                          prior_shift, sklearn_parts)

__all__ = ["HeadFit", "L2_GRID", "SKLEARN_HINT", "fit_head", "fit_temperature", "prior_shift",
           "design", "check_rows_per_class", "paired_interval"]

L2_GRID = tuple(float(c) for c in np.logspace(-4, 2, 7))  # free: inverse regularisation strengths C tried


def _regression(x: np.ndarray, y: np.ndarray, c: float, class_weight: str | None, seed: int, tol: float):
    LogisticRegression, _, _ = sklearn_parts()
    model = LogisticRegression(C=c, class_weight=class_weight, max_iter=10000, tol=tol, random_state=seed)
    return model.fit(x, y)


def _log_loss(probs: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(probs[np.arange(y.size), y], 1e-300, None))))


def fit_head(hidden: np.ndarray, probs: np.ndarray, gold: Sequence[int], *, components: int = 256,
             method: Literal["anchored", "free"] = "anchored",
             class_weight: Literal["balanced", "none"] = "balanced",
             prior: Literal["rows", "uniform"] | Sequence[float] = "rows",
             folds: int = 5, l2_grid: Sequence[float] | None = None, groups: Sequence[int] | None = None,
             seed: int = 0, tol: float = 1e-6, calibrate: Literal["none", "temperature"] = "none") -> HeadFit:
    """Fit the head of the module docstring. ``hidden`` (n, H), ``probs`` (n, C) zero-shot
    probabilities in class order, ``gold`` (n,) class indices; every class needs >= 2 rows.
    ``method``: "anchored" (from the zero-shot reading; ``prior`` weighs the rows, ``l2_grid``
    the strengths λ, default ``head_anchored.ANCHOR_GRID``) or "free" (``class_weight``, ``prior`` as a bias shift,
    ``l2_grid`` the inverse strengths C, default L2_GRID).
    ``groups``: rows sharing a group (one row read under several option orders) share a CV fold;
    ``tol``: the solver's stopping tolerance; ``calibrate``: divide the logits by the temperature
    that fits the held-out CV predictions best (1 without CV)."""
    t0 = time.perf_counter()
    if method == "anchored":

        h, p, y = np.asarray(hidden, dtype=np.float64), np.asarray(probs, dtype=np.float64), np.asarray(gold)
        if h.ndim != 2 or p.ndim != 2 or h.shape[0] != p.shape[0] or y.shape != (p.shape[0],):
            raise ValueError(f"hidden (n, H), probs (n, C) and gold (n,) must agree: {h.shape}, {p.shape}, {y.shape}")
        check_rows_per_class(y, [str(i) for i in range(p.shape[1])])
        return fit_anchored(h, p, y.astype(np.int64), components=components, prior=prior, folds=folds,
                             grid=ANCHOR_GRID if l2_grid is None else l2_grid, groups=groups, seed=seed,
                             tol=tol, calibrate=calibrate, t0=t0)
    if method != "free":
        raise ValueError(f"method: 'anchored' or 'free', got {method!r}")
    l2_grid = L2_GRID if l2_grid is None else l2_grid
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
        _, StratifiedKFold, StratifiedGroupKFold = sklearn_parts()
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
                   seconds=time.perf_counter() - t0, cv_gain=cv_gain, method="free")
