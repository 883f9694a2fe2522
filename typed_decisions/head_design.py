"""What every fitted head's fit shares (``head_regression.py``: the free head and ``fit_head``;
``head_anchored.py``: the anchored head): the standardized, PCA-projected design, the fit's
result, the temperature fitted on held-out predictions, the prior shift and the paired
interval a fit reports its gain over the zero-shot reading with.

    μ, σ    = mean and standard deviation of h per dimension (σ floored at 1e-6 · max σ)
    z       = (h − μ) / σ
    V       = the top d right singular vectors of z (d = min(components, n − 1, H)): PCA
    x       = [clip(log p), z Vᵀ]                               (n, C + d)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InvalidRequestError
from .fitted import LOG_FLOOR, behind_zero_shot

__all__ = ["HeadFit", "MIN_ROWS_PER_CLASS", "SKLEARN_HINT", "check_rows_per_class", "design", "fit_temperature",
           "paired_interval", "prior_shift", "sklearn_parts"]

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
    l2: float              # free: the inverse strength C; anchored: the strength λ (inf: the zero-shot reading)
    folds: int
    temperature: float
    cv_accuracy: float | None
    cv_nll: float | None
    zero_shot_accuracy: float
    seconds: float
    cv_gain: tuple[float, float, float] | None = None  # held-out − zero-shot accuracy, same rows: (mean, 95 % low, high)
    method: str = "anchored"
    zero_shot_cv_nll: float | None = None  # the zero-shot reading's (weighted) log-loss on the same held-out rows

    @property
    def worse_than_zero_shot(self) -> bool:
        """Its own cross-validation finds it behind the zero-shot reading on the rows' held-out
        answers (accuracy), or behind it in log-loss. False without CV (nothing measured)."""
        return behind_zero_shot(self.cv_gain, self.cv_nll, self.zero_shot_cv_nll)


def check_rows_per_class(gold: Sequence[int], classes: Sequence[str], *, field: str = "rows") -> None:
    """Refuse fewer than two rows of any class, naming the classes (InvalidRequestError)."""
    counts = np.bincount(np.asarray(gold, dtype=np.int64), minlength=len(classes))
    short = [f"{c!r} ({int(k)})" for c, k in zip(classes, counts) if k < MIN_ROWS_PER_CLASS]
    if short:
        raise InvalidRequestError(
            f"a fitted head needs at least {MIN_ROWS_PER_CLASS} labelled rows of every option; too few for "
            f"{', '.join(short)}", (field,))


def sklearn_parts():
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold
    except ImportError as e:
        raise ImportError(SKLEARN_HINT) from e
    return LogisticRegression, StratifiedKFold, StratifiedGroupKFold


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
                    seed: int = 0, weights: Sequence[float] | None = None) -> tuple[float, float, float]:
    """The (``weights``-weighted) mean of per-row differences with its 95 % percentile-bootstrap
    interval. Rows that share a group (one row read under several option orders) are resampled
    together, so a row counted R times does not narrow the interval R-fold: each draw takes groups
    with replacement and averages the rows they hold."""
    d = np.asarray(diff, dtype=np.float64)
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=np.float64)
    g = np.arange(d.size) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
    n_groups = int(g.max()) + 1
    sums, sizes = np.bincount(g, weights=w * d, minlength=n_groups), np.bincount(g, weights=w, minlength=n_groups)
    pick = np.random.default_rng(seed).integers(0, n_groups, size=(draws, n_groups))
    means = sums[pick].sum(axis=1) / sizes[pick].sum(axis=1)
    return (float(np.sum(w * d) / np.sum(w)), float(np.percentile(means, 2.5)),
            float(np.percentile(means, 97.5)))
