"""Fitting a calibration on labelled probabilities: the temperature, and the choice of variant.

``calibration.py`` (the core) *applies* a calibration at decide time; this module *fits* one from
rows whose gold labels are known, for ``typed-decisions calibrate``:

    fit_temperature   argmin_T NLL(softmax(log p_n / T), y_n), golden-section search over log T
    calibration_fit   fits temperature, contextual (p / p_cf) and combined on the fit split and
                      reports every variant on both splits; ``best`` = lowest fit-split NLL among
                      the variants that do not lower the fit split's accuracy

With beta = 1/T, NLL is convex in beta (a log-sum-exp minus a linear term), hence unimodal in
log T, so golden-section finds the minimum within the bracket.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..calibration import TypeCalibration, calibrate
from .metrics import EPS, check_pairs, metrics

__all__ = ["apply_calibration", "calibration_fit", "fit_temperature"]


def _nll_at(groups: list[tuple[np.ndarray, np.ndarray]], n: int, temperature: float) -> float:
    """NLL of softmax(log p / T) summed over groups of equal-size questions, divided by n."""
    tot = 0.0
    for lp, y in groups:  # lp (N_k, k), y (N_k,)
        z = lp / temperature  # (N_k, k)
        m = z.max(axis=1, keepdims=True)  # (N_k, 1)
        lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))  # (N_k,)
        tot -= float((z[np.arange(len(y)), y] - lse).sum())
    return tot / n


def fit_temperature(
    probs: Sequence[ArrayLike],
    gold: Sequence[int],
    bounds: tuple[float, float] = (0.05, 20.0),
    tol: float = 1e-6,
) -> float:
    """argmin_T NLL(softmax(log p_n / T), y_n) by golden-section search over log T in log(bounds).

    log p is floored at log(1e-12) so a gold option with p = 0 gives a finite (large) loss.
    Returns a T inside bounds; if the optimum lies outside, the nearest bound.

    >>> round(fit_temperature([[0.9, 0.1]] * 10, [0] * 9 + [1]), 3)   # right 9 times in 10: calibrated
    1.0
    """
    lo, hi = bounds
    if not 0 < lo < hi:
        raise ValueError(f"bounds must satisfy 0 < low < high, got {bounds}")
    ps = check_pairs(probs, gold)
    by_k: dict[int, list[int]] = {}  # questions grouped by option count, to vectorise
    for n, p in enumerate(ps):
        by_k.setdefault(p.size, []).append(n)
    groups = [
        (
            np.log(np.maximum(np.stack([ps[n] / ps[n].sum() for n in idx]), EPS)),  # (N_k, k)
            np.array([int(gold[n]) for n in idx], dtype=np.intp),  # (N_k,)
        )
        for idx in by_k.values()
    ]

    def f(s: float) -> float:
        return _nll_at(groups, len(ps), math.exp(s))

    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5.0) - 1.0) / 2.0  # 0.618..., the golden-section ratio
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:  # the minimum is in [a, d]
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:  # the minimum is in [c, b]
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    s = (a + b) / 2.0
    # the bracket endpoints themselves are candidates (monotone NLL -> optimum at a bound)
    best = min((f(s), s), (f(math.log(lo)), math.log(lo)), (f(math.log(hi)), math.log(hi)))
    return float(math.exp(best[1]))


def apply_calibration(probs: Sequence[np.ndarray], tc: TypeCalibration, cf: np.ndarray | None) -> list[np.ndarray]:
    """``calibrate`` each row with one type's calibration (``cf``: the content-free probabilities).

    >>> apply_calibration([np.array([0.6, 0.4])], TypeCalibration(temperature=0.5, contextual=True),
    ...                   np.array([0.75, 0.25]))[0].round(4).tolist()
    [0.2, 0.8]
    """
    return [calibrate(p, tc.temperature, cf if tc.contextual else None) for p in probs]


def calibration_fit(fit_probs: Sequence[np.ndarray], fit_gold: Sequence[int], test_probs: Sequence[np.ndarray],
                    test_gold: Sequence[int], content_free: np.ndarray, *, qtype: str = "choice",
                    n_bins: int = 10) -> dict[str, Any]:
    """Fit temperature (T), contextual (p / p_cf) and combined (p / p_cf, then T) on the fit split;
    report all four variants (with "none") on both splits. ``best`` minimises NLL on the FIT split
    among the variants that do not lower the FIT split's accuracy (temperature never changes the
    argmax; dividing by p_cf can), so the test split stays untouched by the choice and a
    calibration is never chosen for trading accuracy for likelihood."""
    cf = np.asarray(content_free, dtype=np.float64)
    t_plain = fit_temperature(fit_probs, fit_gold)
    ctx_fit = [calibrate(p, 1.0, cf) for p in fit_probs]
    t_comb = fit_temperature(ctx_fit, fit_gold)
    variants = {"none": TypeCalibration(), "temperature": TypeCalibration(temperature=t_plain),
                "contextual": TypeCalibration(contextual=True),
                "combined": TypeCalibration(temperature=t_comb, contextual=True)}
    out: dict[str, Any] = {"content_free_probabilities": cf.tolist(), "variants": {}}
    for name, tc in variants.items():
        out["variants"][name] = {
            "temperature": tc.temperature, "contextual": tc.contextual,
            "fit": {k: v for k, v in metrics(apply_calibration(fit_probs, tc, cf), fit_gold, n_bins=n_bins, qtype=qtype).items()
                    if k in ("n", "accuracy", "macro_f1", "nll", "brier", "ece")},
            "test": {k: v for k, v in metrics(apply_calibration(test_probs, tc, cf), test_gold, n_bins=n_bins, qtype=qtype).items()
                     if k in ("n", "accuracy", "macro_f1", "nll", "brier", "ece")},
        }
    floor = out["variants"]["none"]["fit"]["accuracy"]
    eligible = [v for v in variants if out["variants"][v]["fit"]["accuracy"] >= floor - 1e-12]
    out["best"] = min(eligible, key=lambda v: out["variants"][v]["fit"]["nll"])
    return out
