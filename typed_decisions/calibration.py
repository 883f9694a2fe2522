"""Calibration maths: temperature scaling, contextual calibration, metrics, the calibration file.

`readout.py` produces option probabilities p; this file adjusts them after the fact, per question
type (choice / score / noul), and measures how well they are calibrated. Numpy + pydantic only,
no scipy. The file it reads and writes (`CalibrationFile`) is versioned JSON.

    temperature       p_T = softmax(log p / T)                 T > 1 flattens, T < 1 sharpens
    contextual        p_c  ∝ p / p_cf                          p_cf: probabilities for a content-free
                                                               state (Zhao et al. 2021, "Calibrate
                                                               Before Use")
    combined          p_out = softmax(log(p / p_cf) / T)       contextual first, then temperature

Fitting T: minimise NLL(T) = -(1/N) sum_n log softmax(log p_n / T)[y_n] over log T by golden-section
search. With beta = 1/T, NLL is convex in beta (a log-sum-exp minus a linear term), hence unimodal
in log T, so golden-section finds the minimum within the bracket.

Metrics (N questions, p_n the probabilities, y_n the gold index):

    nll       -(1/N) sum_n log max(p_n[y_n], eps),  eps = 1e-12
    brier     (1/N) sum_n sum_i (p_n[i] - [i == y_n])^2        (multi-class Brier, range [0, 2])
    ece       sum_b (|B_b| / N) * |acc(B_b) - conf(B_b)|, confidence = max_i p_n[i], B equal-width
              bins on [0, 1]: bin b holds confidences in (b/B, (b+1)/B], bin 0 also holds 0
    accuracy  (1/N) sum_n [argmax p_n == y_n]
    macro_f1  mean over classes in gold ∪ predicted of 2TP / (2TP + FP + FN)

Questions may have different numbers of options (ragged lists) everywhere except macro-F1, which
takes class indices.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "apply_temperature",
    "contextual_calibrate",
    "calibrate",
    "fit_temperature",
    "nll",
    "brier",
    "ece",
    "accuracy",
    "macro_f1",
    "TypeCalibration",
    "CalibrationFile",
]

EPS = 1e-12  # probability floor inside log for NLL and fitting (a gold p of exactly 0 would be +inf)
QuestionType = Literal["choice", "score", "noul"]


def _probs(p: ArrayLike) -> np.ndarray:
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"probabilities must be a non-empty 1-D array, got shape {a.shape}")
    if not np.isfinite(a).all() or (a < 0).any() or a.sum() <= 0:
        raise ValueError(f"probabilities must be finite, >= 0 and not all 0, got {a.tolist()}")
    return a


def _softmax_log(logp: np.ndarray) -> np.ndarray:
    """softmax of log-probabilities (entries may be -inf), max-subtracted."""
    e = np.exp(logp - logp.max())
    return e / e.sum()


# -----------------------------------------------------------------------------
# transforms


def apply_temperature(probs: ArrayLike, temperature: float) -> np.ndarray:
    """p_T = softmax(log p / T). Zeros stay zero; T = 1 returns p (renormalized).

    >>> apply_temperature([0.8, 0.2], 2.0).round(4).tolist()      # sqrt(.8) : sqrt(.2) = 2 : 1
    [0.6667, 0.3333]
    """
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    p = _probs(probs)
    with np.errstate(divide="ignore"):
        logp = np.log(p)  # (k,) -inf where p == 0
    return _softmax_log(logp / temperature)


def contextual_calibrate(probs: ArrayLike, content_free: ArrayLike) -> np.ndarray:
    """p_c ∝ p / p_cf (Zhao et al. 2021: W = diag(p_cf)^-1, b = 0, then normalized).

    The paper writes q = softmax(W p + b) and its code takes argmax(W p); we normalize W p
    directly, which divides out the model's prior for each option and keeps a distribution.
    The argmax is the same in all three forms.

    >>> contextual_calibrate([0.6, 0.4], [0.75, 0.25]).round(4).tolist()   # .8 : 1.6 = 1 : 2
    [0.3333, 0.6667]
    """
    p, cf = _probs(probs), _probs(content_free)
    if p.shape != cf.shape:
        raise ValueError(f"content-free probabilities have {cf.size} entries, the question has {p.size}")
    if (cf <= 0).any():
        raise ValueError("content-free probabilities must all be > 0 to divide by them")
    q = p / cf
    return q / q.sum()


def calibrate(probs: ArrayLike, temperature: float = 1.0, content_free: ArrayLike | None = None) -> np.ndarray:
    """Contextual calibration (if content_free is given), then temperature scaling.

    >>> calibrate([0.6, 0.4], temperature=0.5, content_free=[0.75, 0.25]).round(4).tolist()  # 1 : 4
    [0.2, 0.8]
    """
    p = _probs(probs)
    if content_free is not None:
        p = contextual_calibrate(p, content_free)
    return apply_temperature(p, temperature)


# -----------------------------------------------------------------------------
# metrics


def _check_pairs(probs: Sequence[ArrayLike], gold: Sequence[int]) -> list[np.ndarray]:
    if len(probs) != len(gold) or len(probs) == 0:
        raise ValueError(f"need equally many probability vectors and gold labels (>0), got {len(probs)} and {len(gold)}")
    ps = [_probs(p) for p in probs]
    for n, (p, y) in enumerate(zip(ps, gold)):
        if not 0 <= int(y) < p.size:
            raise ValueError(f"gold label {y} of item {n} is outside 0..{p.size - 1}")
    return ps


def nll(probs: Sequence[ArrayLike], gold: Sequence[int]) -> float:
    """-(1/N) sum_n log max(p_n[y_n], 1e-12).

    >>> round(nll([[0.5, 0.5], [0.25, 0.75]], [0, 1]), 6)      # (ln 2 + ln 4/3) / 2
    0.490415
    """
    ps = _check_pairs(probs, gold)
    return float(-np.mean([math.log(max(p[int(y)], EPS)) for p, y in zip(ps, gold)]))


def brier(probs: Sequence[ArrayLike], gold: Sequence[int]) -> float:
    """(1/N) sum_n sum_i (p_n[i] - onehot(y_n)[i])^2.

    >>> brier([[0.5, 0.5], [0.25, 0.75]], [0, 1])              # (0.5 + 0.125) / 2
    0.3125
    """
    ps = _check_pairs(probs, gold)
    tot = 0.0
    for p, y in zip(ps, gold):
        onehot = np.zeros_like(p)
        onehot[int(y)] = 1.0
        tot += float(((p - onehot) ** 2).sum())
    return tot / len(ps)


def ece(probs: Sequence[ArrayLike], gold: Sequence[int], n_bins: int = 10) -> float:
    """Expected calibration error with n_bins equal-width bins over the top-1 confidence.

    Bin b (0-based) holds confidences c with b/B < c <= (b+1)/B; c = 0 goes to bin 0.

    >>> round(ece([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4]], [0, 1, 0, 0]), 6)  # |.5-.9|/2 + |1-.6|/2
    0.4
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    ps = _check_pairs(probs, gold)
    conf = np.array([p.max() for p in ps])  # (N,)
    hit = np.array([float(np.argmax(p) == int(y)) for p, y in zip(ps, gold)])  # (N,)
    b = np.clip(np.ceil(conf * n_bins).astype(np.int64) - 1, 0, n_bins - 1)  # (N,) bin index
    tot = 0.0
    for k in range(n_bins):
        m = b == k
        if m.any():
            tot += m.sum() / len(ps) * abs(hit[m].mean() - conf[m].mean())
    return float(tot)


def accuracy(probs: Sequence[ArrayLike], gold: Sequence[int]) -> float:
    """(1/N) sum_n [argmax p_n == y_n] (ties -> first index).

    >>> accuracy([[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]], [1, 1, 0])
    0.6666666666666666
    """
    ps = _check_pairs(probs, gold)
    return float(np.mean([np.argmax(p) == int(y) for p, y in zip(ps, gold)]))


def macro_f1(pred: Sequence[int], gold: Sequence[int]) -> float:
    """Mean over classes c in gold ∪ pred of F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c).

    >>> round(macro_f1([0, 0, 1, 1], [0, 1, 1, 1]), 6)         # F1_0 = 2/3, F1_1 = 4/5
    0.733333
    """
    if len(pred) != len(gold) or len(pred) == 0:
        raise ValueError(f"need equally many predictions and gold labels (>0), got {len(pred)} and {len(gold)}")
    pr, gd = np.asarray(pred, dtype=np.int64), np.asarray(gold, dtype=np.int64)
    scores = []
    for c in np.union1d(pr, gd):
        tp = int(((pr == c) & (gd == c)).sum())
        fp = int(((pr == c) & (gd != c)).sum())
        fn = int(((pr != c) & (gd == c)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


# -----------------------------------------------------------------------------
# fitting


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
    ps = _check_pairs(probs, gold)
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


# -----------------------------------------------------------------------------
# the calibration file


class TypeCalibration(BaseModel):
    """Calibration of one question type."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, gt=0, description="T in softmax(log p / T); 1 = unchanged")
    contextual: bool = Field(False, description="divide by the content-free probabilities first")


class CalibrationFile(BaseModel):
    """Versioned calibration file (JSON), one per model.

    {"version": 1, "model": "qwen2.5-coder-1.5b-instruct", "created": "2025-01-01T00:00:00Z",
     "per_type": {"choice": {"temperature": 1.3, "contextual": true}},
     "content_free_state": "N/A", "notes": ""}

    A type absent from per_type is left uncalibrated (T = 1, not contextual).
    """

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    model: str = Field(description="name of the exported model the values were fitted on")
    created: str = Field(description="ISO-8601 timestamp of the fit")
    per_type: dict[QuestionType, TypeCalibration] = Field(default_factory=dict)
    content_free_state: str | None = Field(
        None, description="the state text used to get p_cf (e.g. 'N/A'); required if any type is contextual"
    )
    notes: str = ""

    @model_validator(mode="after")
    def _contextual_needs_state(self) -> CalibrationFile:
        ctx = [t for t, c in self.per_type.items() if c.contextual]
        if ctx and self.content_free_state is None:
            raise ValueError(f"per_type {ctx} use contextual calibration; set content_free_state (e.g. 'N/A')")
        return self

    def for_type(self, qtype: QuestionType) -> TypeCalibration:
        return self.per_type.get(qtype, TypeCalibration())

    @classmethod
    def load(cls, path: str | Path) -> CalibrationFile:
        return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
