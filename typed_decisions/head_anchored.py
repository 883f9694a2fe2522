"""The anchored head: a fitted head that starts from the zero-shot reading (``head_regression.py``
holds the shared design — standardize, PCA — and the free regression).

A free regression starts from nothing (L2 toward 0) and has to relearn from the rows what the
zero-shot reading already knew. The anchored head starts from the zero-shot reading and moves
only as far as the rows justify (L2-SP, Li et al. 2018):

    logits  = lp + D lp + A x + b             lp = clip(log p), x = z Vᵀ; D (C, C), A (C, d), b (C,)
    loss    = Σᵢ wᵢ CE(softmax(logitsᵢ), yᵢ) / Σᵢ wᵢ + λ/2 (‖A‖² + ρ (‖D‖² + ‖b‖²))
    wᵢ      = π(yᵢ) / f(yᵢ)                   π the task's class frequencies (``prior``), f the rows'

so D = A = b = 0 — the head *is* the zero-shot reading — is where a large λ holds it. The
calibration part (D, b: C² + C numbers that a handful of rows pin down, e.g. a zero-shot reading
that leans to one option) is held back less than the C·d weights on the hidden state: ρ =
CALIBRATION_RHO = 0.01 (chosen on the dev bench: docs/evaluation.md, "Fitted heads"). λ is chosen
among ANCHOR_GRID by the weighted held-out log-loss of stratified k-fold CV, and "no change" (λ = ∞,
the zero-shot reading's own held-out log-loss) is a candidate too: with rows that say nothing the
head stays exactly zero-shot. The weights make the loss the expected log-loss under the task's
class frequencies, not under how the rows were sampled (k rows per option are not the task's
frequencies): ``prior="rows"`` (the rows are a sample as answers occur) weighs every row 1,
``"uniform"`` balances the classes, a list gives π. Folded, W = [I + D, A V] and the bias b, the
same served form as the free head. The solver is scipy's L-BFGS on this smooth convex loss
(gradient below, ``_anchored``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .head_design import HeadFit, design, fit_temperature, paired_interval, sklearn_parts

__all__ = ["ANCHOR_GRID", "fit_anchored", "row_weights"]

# The strengths λ tried (and λ = ∞: no change). Not below 1: with 2 rows per option the rows are
# always separable (n rows span n − 1 PCA directions), a 2-fold CV of 4 rows cannot tell weak
# strengths apart, and the weakest won it on the binary dev sets with confident wrong answers
# (10 dev sets, k = 2: test log-loss 1.067 with 10⁻⁴ … 10³, 0.935 with 1 … 10³, zero-shot 1.039;
# k = 8 and 32 alike within 0.003; docs/evaluation.md, "Fitted heads").
ANCHOR_GRID = tuple(float(c) for c in np.logspace(0, 3, 4))
CALIBRATION_RHO = 0.01  # the calibration part (D, b: C² + C numbers) is held back by ρλ, the hidden part (A) by λ
ONE_SE = False         # choose λ by the one-standard-error rule (``choose``)


def row_weights(gold: np.ndarray, n_classes: int, prior: str | Sequence[float]) -> np.ndarray:
    """wᵢ = π(yᵢ) / f(yᵢ), mean 1: what makes a loss over the rows (class frequencies f) the expected
    loss under the task's class frequencies π — "rows": π = f (every row 1), "uniform", or given.

    >>> row_weights(np.array([0, 0, 0, 1]), 2, "uniform").tolist()
    [0.6666666666666666, 0.6666666666666666, 0.6666666666666666, 2.0]
    """
    f = np.bincount(gold, minlength=n_classes) / gold.size
    if isinstance(prior, str):
        if prior == "rows":
            return np.ones(gold.size)
        if prior != "uniform":
            raise ValueError(f"prior: 'rows', 'uniform' or one frequency per class, got {prior!r}")
        pi = np.full(n_classes, 1.0 / n_classes)
    else:
        pi = np.asarray(prior, dtype=np.float64)
        if pi.shape != (n_classes,) or np.any(pi <= 0) or not np.all(np.isfinite(pi)):
            raise ValueError(f"prior: {n_classes} class frequencies > 0, got {list(pi)}")
        pi = pi / pi.sum()
    w = pi[gold] / f[gold]
    return w / w.mean()


def _penalty_scale(c: int, d: int, rho: float) -> np.ndarray:
    """Per parameter of θ = [D, A, b]: ρ for the calibration part (D, b), 1 for the hidden part (A)."""
    return np.concatenate([np.full(c * c, rho), np.ones(c * d), np.full(c, rho)])


def _anchored_loss(theta: np.ndarray, lp: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray,
                   lam: float, scale: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """The anchored loss of the module docstring and its gradient, θ = [D, A, b] flattened, ``scale``
    the penalty's weight per parameter (``_penalty_scale``: ρ for D and b, 1 for A; default all 1):

        G = diag(w) (softmax(logits) − onehot(y)) / Σw       ∂/∂D = Gᵀ lp + ρλD,  ∂/∂A = Gᵀ x + λA,  ∂/∂b = Σᵢ Gᵢ + ρλb
    """
    n, c = lp.shape
    d = x.shape[1]
    dm, a, b = theta[: c * c].reshape(c, c), theta[c * c : c * c + c * d].reshape(c, d), theta[c * c + c * d :]
    z = lp + lp @ dm.T + x @ a.T + b
    z = z - z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    wn = w / w.sum()
    s = np.ones_like(theta) if scale is None else scale
    loss = float(np.sum(wn * (log_norm - z[np.arange(n), y]))) + 0.5 * lam * float(theta @ (s * theta))
    g = np.exp(z - log_norm[:, None])
    g[np.arange(n), y] -= 1.0
    g *= wn[:, None]
    grad = np.concatenate([(g.T @ lp).ravel(), (g.T @ x).ravel(), g.sum(axis=0)]) + lam * s * theta
    return loss, grad


def _anchored(lp: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray, lam: float, tol: float,
              start: np.ndarray | None = None, rho: float = 1.0) -> np.ndarray:
    """θ minimising ``_anchored_loss`` (L-BFGS from ``start``, else from 0: the zero-shot reading)."""
    from scipy.optimize import minimize

    c, d = lp.shape[1], x.shape[1]
    theta0 = np.zeros(c * c + c * d + c) if start is None else start
    res = minimize(_anchored_loss, theta0, args=(lp, x, y, w, lam, _penalty_scale(c, d, rho)), jac=True,
                   method="L-BFGS-B",
                   options={"maxiter": 20000, "gtol": tol, "ftol": 1e-15})
    return res.x


def _anchored_logits(theta: np.ndarray, lp: np.ndarray, x: np.ndarray) -> np.ndarray:
    c, d = lp.shape[1], x.shape[1]
    dm, a, b = theta[: c * c].reshape(c, c), theta[c * c : c * c + c * d].reshape(c, d), theta[c * c + c * d :]
    return lp + lp @ dm.T + x @ a.T + b


def _softmax_rows(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _splits(x: np.ndarray, y: np.ndarray, groups: Sequence[int] | None, k: int, seed: int) -> list:
    _, StratifiedKFold, StratifiedGroupKFold = sklearn_parts()
    if groups is not None:
        return list(StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed).split(x, y, groups))
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(x, y))


def _weighted_row_losses(probs: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each row's log-loss times wᵢ / mean(w): their mean is the weighted log-loss."""
    return -w * np.log(np.clip(probs[np.arange(y.size), y], 1e-300, None)) / w.mean()


def choose(losses: list[np.ndarray], one_se: bool) -> int:
    """Which candidate (ordered from the most to the least held back, "no change" first) the CV
    picks from each one's per-row held-out losses: the least mean loss, or with ``one_se`` the
    first candidate whose mean is within one standard error of the best's, paired on the rows
    (the one-standard-error rule: move only as far as the rows clearly justify).

    >>> choose([np.array([1.0, 1.0, 1.0]), np.array([0.9, 1.1, 0.95])], one_se=True)
    0
    >>> choose([np.array([1.0, 1.0, 1.0]), np.array([0.5, 0.6, 0.55])], one_se=True)
    1
    """
    means = [float(l.mean()) for l in losses]
    best = int(np.argmin(means))
    if not one_se:
        return best
    for i, l in enumerate(losses[: best + 1]):
        diff = l - losses[best]
        se = float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else 0.0
        if diff.mean() <= se:
            return i
    return best


def fit_anchored(h: np.ndarray, p: np.ndarray, y: np.ndarray, *, components: int, prior: str | Sequence[float],
                  folds: int, grid: Sequence[float], groups: Sequence[int] | None, seed: int, tol: float,
                  calibrate: str, t0: float, rho: float | None = None, one_se: bool | None = None) -> HeadFit:
    rho = CALIBRATION_RHO if rho is None else rho
    one_se = ONE_SE if one_se is None else one_se
    n, n_classes = p.shape
    mean, scale, v, design_x = design(h, p, components)
    lp, x = design_x[:, :n_classes], design_x[:, n_classes:]
    w = row_weights(y, n_classes, prior)
    counts = np.bincount(y, minlength=n_classes)
    units = counts if groups is None else np.array(
        [np.unique(np.asarray(groups)[y == c]).size for c in range(n_classes)])
    k = int(min(folds, units.min()))
    zero_p = _softmax_rows(lp)
    lam, cv_acc, cv_nll, cv_gain, zero_nll, held_p, held_y = float("inf"), None, None, None, None, None, None
    if k >= 2:
        splits = _splits(x, y, groups, k, seed)
        seen = np.zeros(n, dtype=bool)
        for _, test in splits:
            seen[test] = True
        candidates = [(float("inf"), zero_p)]   # "no change" first, then strong to weak
        starts: dict[int, np.ndarray] = {}
        for c in sorted(grid, reverse=True):   # each fold warm-started from the stronger λ's solution
            held = np.zeros((n, n_classes))
            for f, (train, test) in enumerate(splits):
                starts[f] = _anchored(lp[train], x[train], y[train], w[train], c, tol, starts.get(f), rho)
                held[test] = _softmax_rows(_anchored_logits(starts[f], lp[test], x[test]))
            candidates.append((float(c), held))
        losses = [_weighted_row_losses(held[seen], y[seen], w[seen]) for _, held in candidates]
        pick = choose(losses, one_se)
        lam, held = candidates[pick]
        zero_nll, cv_nll = float(losses[0].mean()), float(losses[pick].mean())
        held_p, held_y = held[seen], y[seen]
        hit = held_p.argmax(1) == held_y
        cv_acc = float(np.sum(w[seen] * hit) / np.sum(w[seen]))
        gain = hit.astype(np.float64) - (zero_p[seen].argmax(1) == held_y)
        cv_gain = paired_interval(gain, None if groups is None else np.asarray(groups)[seen], seed=seed,
                                  weights=w[seen])
    elif len(grid) == 1:
        lam = float(grid[0])
    if np.isinf(lam):
        theta = np.zeros(n_classes * n_classes + n_classes * x.shape[1] + n_classes)
    else:
        theta = _anchored(lp, x, y, w, lam, tol, rho=rho)
    c2, d = n_classes * n_classes, n_classes * x.shape[1]
    dm, a, b = theta[:c2].reshape(n_classes, n_classes), theta[c2 : c2 + d].reshape(n_classes, -1), theta[c2 + d :]
    weights = np.concatenate([np.eye(n_classes) + dm, a @ v], axis=1)      # (C, C + H)
    bias = np.array(b, dtype=np.float64)
    temperature = 1.0
    if calibrate == "temperature" and held_p is not None:
        temperature = fit_temperature(held_p, held_y, np.zeros(n_classes))
        weights, bias = weights / temperature, bias / temperature
    return HeadFit(mean=mean, scale=scale, weights=weights, bias=bias, components=v.shape[0], l2=lam,
                   folds=k if k >= 2 else 0, temperature=temperature, cv_accuracy=cv_acc, cv_nll=cv_nll,
                   zero_shot_accuracy=float(np.sum(w * (p.argmax(1) == y)) / np.sum(w)),
                   seconds=time.perf_counter() - t0, cv_gain=cv_gain, method="anchored", zero_shot_cv_nll=zero_nll)
