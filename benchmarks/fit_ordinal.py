"""An ordinal (cumulative-logit) head for score questions, to measure against the multinomial one (#31).

A score's levels are ordered. The proportional-odds model uses that order with one direction w
and C − 1 increasing thresholds θ:

    η            = wᵀx                                  x: the multinomial head's inputs (``fit.design``)
    P(y ≤ j | x) = σ(θ_j − η)                           j = 0 … C − 2
    P(y = j | x) = σ(θ_j − η) − σ(θ_{j−1} − η)           θ_{−1} = −∞, θ_{C−1} = +∞

fitted by L2-penalised weighted log-likelihood (C·Σ cᵢ·(−log P(yᵢ)) + ½‖w‖², the objective of
scikit-learn's LogisticRegression, balanced class weights cᵢ), θ_j = a₀ + Σ_{m≤j} exp(a_m) so the
thresholds stay ordered, L-BFGS with the analytic gradient; the regularisation by stratified-CV
log-loss over ``fit.L2_GRID`` like the multinomial head. It has d + C − 1 parameters where the
multinomial head has C·(d + 1): fewer to learn from few rows, if the hidden state orders the levels.

This module is a study: ``fit_curves.py --heads ...,rows+ordinal`` scores it next to the
multinomial head on the same cached features. It is not served (``FittedHead`` is a softmax).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.model_selection import StratifiedKFold

from typed_decisions.head_regression import L2_GRID, design


def _thresholds(a: np.ndarray) -> np.ndarray:
    return a[0] + np.concatenate([[0.0], np.cumsum(np.exp(a[1:]))])


def ordinal_probabilities(x: np.ndarray, w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """P(y = j | x) (n, C) of the module docstring."""
    theta = _thresholds(a)
    cum = expit(theta[None, :] - (x @ w)[:, None])                       # (n, C − 1)
    cum = np.concatenate([np.zeros((x.shape[0], 1)), cum, np.ones((x.shape[0], 1))], axis=1)
    return np.clip(np.diff(cum, axis=1), 1e-300, None)


def _fit(x: np.ndarray, y: np.ndarray, n_classes: int, c: float, sample_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, d = x.shape

    def loss_grad(params: np.ndarray) -> tuple[float, np.ndarray]:
        w, a = params[:d], params[d:]
        theta = _thresholds(a)
        eta = x @ w
        up = np.where(y < n_classes - 1, theta[np.minimum(y, n_classes - 2)] - eta, np.inf)
        lo = np.where(y > 0, theta[np.maximum(y - 1, 0)] - eta, -np.inf)
        u, lw = expit(up), expit(lo)
        prob = np.clip(u - lw, 1e-300, None)
        du, dl = u * (1 - u), lw * (1 - lw)                               # σ' at the two thresholds
        loss = c * float(np.sum(sample_w * -np.log(prob))) + 0.5 * float(w @ w)
        g_eta = c * sample_w * (du - dl) / prob                           # ∂loss/∂η
        g_w = x.T @ g_eta + w
        g_theta = np.zeros(n_classes - 1)
        np.add.at(g_theta, np.minimum(y, n_classes - 2)[y < n_classes - 1],
                  (-c * sample_w * du / prob)[y < n_classes - 1])
        np.add.at(g_theta, np.maximum(y - 1, 0)[y > 0], (c * sample_w * dl / prob)[y > 0])
        tail = np.cumsum(g_theta[::-1])[::-1]                             # Σ_{j ≥ m} ∂/∂θ_j
        g_a = np.concatenate([[g_theta.sum()], np.exp(a[1:]) * tail[1:]])
        return loss, np.concatenate([g_w, g_a])

    counts = np.bincount(y, minlength=n_classes)
    start = np.log(np.clip(np.cumsum(counts)[:-1] / n, 1e-3, 1 - 1e-3))
    start = start - np.log1p(-np.exp(start))                              # logit of the rows' cumulative shares
    a0 = np.concatenate([[start[0]], np.log(np.maximum(np.diff(start), 1e-3))])
    res = minimize(loss_grad, np.concatenate([np.zeros(d), a0]), jac=True, method="L-BFGS-B",
                   options={"maxiter": 5000})
    return res.x[:d], res.x[d:]


def fit_ordinal(hidden: np.ndarray, probs: np.ndarray, gold: Sequence[int], *, components: int = 256,
                folds: int = 5, l2_grid: Sequence[float] = L2_GRID, seed: int = 0):
    """A fitted ordinal head: a function from (hidden, probs) to P(level) (n, C), and the chosen C."""
    y = np.asarray(gold, dtype=np.int64)
    n_classes = probs.shape[1]
    mean, scale, v, x = design(np.asarray(hidden, np.float64), np.asarray(probs, np.float64), components)
    counts = np.bincount(y, minlength=n_classes)
    sample_w = (y.size / (n_classes * counts))[y]                          # balanced
    k = int(min(folds, counts.min()))
    best = L2_GRID[len(L2_GRID) // 2]
    if k >= 2:
        splits = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(x, y))
        losses = []
        for c in l2_grid:
            held = np.zeros((y.size, n_classes))
            for tr, te in splits:
                w, a = _fit(x[tr], y[tr], n_classes, c, sample_w[tr])
                held[te] = ordinal_probabilities(x[te], w, a)
            losses.append((float(-np.mean(np.log(held[np.arange(y.size), y]))), c))
        best = min(losses)[1]
    w, a = _fit(x, y, n_classes, best, sample_w)

    def predict(h: np.ndarray, p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            lp = np.maximum(np.log(p), np.log(1e-12))
        xt = np.concatenate([lp, ((h - mean) / scale) @ v.T], axis=1)
        return ordinal_probabilities(xt, w, a)

    return predict, best
