"""Metrics of option probabilities against gold labels: accuracy, macro-F1, NLL, Brier, ECE, bins.

Pure numpy. N questions, p_n the probabilities (float64; ragged lists are fine: questions may have
different numbers of options, except for macro-F1, which takes class indices), y_n the gold index:

    nll          -(1/N) sum_n log max(p_n[y_n], eps),  eps = 1e-12
    brier        (1/N) sum_n sum_i (p_n[i] - [i == y_n])^2        (multi-class Brier, range [0, 2])
    ece          sum_b (|B_b| / N) * |acc(B_b) - conf(B_b)|, confidence = max_i p_n[i], B equal-width
                 bins on [0, 1]: bin b holds confidences in (b/B, (b+1)/B], bin 0 also holds 0
    accuracy     (1/N) sum_n [argmax p_n == y_n]
    macro_f1     mean over classes in gold ∪ predicted of 2TP / (2TP + FP + FN)
    reliability  per confidence bin (the ECE's bins): count, accuracy, mean confidence
    risk_coverage  for thresholds t: coverage = share of rows with max p >= t, accuracy on them

The confidence binned here is the top option probability p* = max_i p_i, the same number a
preset's or router's ``threshold`` is compared with. ``metrics`` bundles them into the report of
``run.evaluate``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..readout import as_probabilities

__all__ = ["COVERAGES", "EPS", "THRESHOLDS", "accuracy", "brier", "coverage_accuracy", "ece", "macro_f1",
           "metrics", "nll", "reliability_bins", "risk_coverage"]

EPS = 1e-12  # probability floor inside log for NLL and fitting (a gold p of exactly 0 would be +inf)
THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
COVERAGES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


def check_pairs(probs: Sequence[ArrayLike], gold: Sequence[int]) -> list[np.ndarray]:
    """Validated probability vectors (sum > 0, not necessarily 1), one per gold index in range."""
    if len(probs) != len(gold) or len(probs) == 0:
        raise ValueError(f"need equally many probability vectors and gold labels (>0), got {len(probs)} and {len(gold)}")
    ps = [as_probabilities(p, normalized=False) for p in probs]
    for n, (p, y) in enumerate(zip(ps, gold)):
        if not 0 <= int(y) < p.size:
            raise ValueError(f"gold label {y} of item {n} is outside 0..{p.size - 1}")
    return ps


def nll(probs: Sequence[ArrayLike], gold: Sequence[int]) -> float:
    """-(1/N) sum_n log max(p_n[y_n], 1e-12).

    >>> round(nll([[0.5, 0.5], [0.25, 0.75]], [0, 1]), 6)      # (ln 2 + ln 4/3) / 2
    0.490415
    """
    ps = check_pairs(probs, gold)
    return float(-np.mean([math.log(max(p[int(y)], EPS)) for p, y in zip(ps, gold)]))


def brier(probs: Sequence[ArrayLike], gold: Sequence[int]) -> float:
    """(1/N) sum_n sum_i (p_n[i] - onehot(y_n)[i])^2.

    >>> brier([[0.5, 0.5], [0.25, 0.75]], [0, 1])              # (0.5 + 0.125) / 2
    0.3125
    """
    ps = check_pairs(probs, gold)
    tot = 0.0
    for p, y in zip(ps, gold):
        onehot = np.zeros_like(p)
        onehot[int(y)] = 1.0
        tot += float(((p - onehot) ** 2).sum())
    return tot / len(ps)


def accuracy(probs: Sequence[ArrayLike], gold: Sequence[int]) -> float:
    """(1/N) sum_n [argmax p_n == y_n] (ties -> first index).

    >>> accuracy([[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]], [1, 1, 0])
    0.6666666666666666
    """
    ps = check_pairs(probs, gold)
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


# ---------------------------------------------------------------- confidence bins (ECE, reliability)


def _confidence_and_hits(probs: Sequence[ArrayLike], gold: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(p* = max_i p_n[i], [argmax p_n == y_n] as 0/1), both (N,)."""
    conf = np.array([float(np.max(p)) for p in probs])  # (N,)
    hit = np.array([float(np.argmax(p) == int(y)) for p, y in zip(probs, gold)])  # (N,)
    return conf, hit


def reliability_bins(probs: Sequence[ArrayLike], gold: Sequence[int], n_bins: int = 10) -> list[dict[str, Any]]:
    """Per equal-width confidence bin (b/B, (b+1)/B]: count, accuracy, mean confidence (None if empty).

    The one place confidences are binned: ``ece`` sums over these bins.

    >>> [b["count"] for b in reliability_bins([[0.9, 0.1], [0.55, 0.45]], [0, 1], n_bins=2)]
    [0, 2]
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf, hit = _confidence_and_hits(probs, gold)
    b = np.clip(np.ceil(conf * n_bins).astype(np.int64) - 1, 0, n_bins - 1)  # (N,) bin index, 0 also holds c = 0
    out = []
    for k in range(n_bins):
        m = b == k
        out.append({"lo": k / n_bins, "hi": (k + 1) / n_bins, "count": int(m.sum()),
                    "accuracy": float(hit[m].mean()) if m.any() else None,
                    "confidence": float(conf[m].mean()) if m.any() else None})
    return out


def ece(probs: Sequence[ArrayLike], gold: Sequence[int], n_bins: int = 10) -> float:
    """Expected calibration error with n_bins equal-width bins over the top-1 confidence.

    Bin b (0-based) holds confidences c with b/B < c <= (b+1)/B; c = 0 goes to bin 0.

    >>> round(ece([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4]], [0, 1, 0, 0]), 6)  # |.5-.9|/2 + |1-.6|/2
    0.4
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    ps = check_pairs(probs, gold)
    tot = 0.0
    for b in reliability_bins(ps, gold, n_bins):
        if b["count"]:
            tot += b["count"] / len(ps) * abs(b["accuracy"] - b["confidence"])
    return float(tot)


def risk_coverage(probs: Sequence[ArrayLike], gold: Sequence[int],
                  thresholds: Sequence[float] = THRESHOLDS) -> list[dict[str, Any]]:
    """For each t: coverage = share of rows with max p >= t, accuracy on them (None if none).

    >>> risk_coverage([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]], [0, 1, 1], [0.0, 0.65, 0.95])
    [{'threshold': 0.0, 'n': 3, 'coverage': 1.0, 'accuracy': 0.6666666666666666}, {'threshold': 0.65, 'n': 2, 'coverage': 0.6666666666666666, 'accuracy': 1.0}, {'threshold': 0.95, 'n': 0, 'coverage': 0.0, 'accuracy': None}]
    """
    conf, hit = _confidence_and_hits(probs, gold)
    out = []
    for t in thresholds:
        m = conf >= t
        out.append({"threshold": float(t), "n": int(m.sum()), "coverage": float(m.mean()),
                    "accuracy": float(hit[m].mean()) if m.any() else None})
    return out


def coverage_accuracy(scores: Sequence[float], hits: Sequence[float],
                      coverages: Sequence[float] = COVERAGES) -> list[dict[str, Any]]:
    """Risk–coverage by any abstain signal: answer only the ⌈c·N⌉ rows with the highest score
    (ties broken by row order, stable sort), accuracy on those. Compares signals at equal coverage
    (max p, the label mass, their product), which thresholds on different scales cannot.

    >>> coverage_accuracy([0.9, 0.2, 0.5, 0.7], [1, 0, 0, 1], [1.0, 0.5])
    [{'coverage': 1.0, 'n': 4, 'accuracy': 0.5}, {'coverage': 0.5, 'n': 2, 'accuracy': 1.0}]
    """
    s = np.asarray(scores, dtype=np.float64)  # (N,)
    h = np.asarray(hits, dtype=np.float64)    # (N,)
    if s.shape != h.shape or s.ndim != 1 or s.size == 0:
        raise ValueError(f"need equally many scores and hits (>0), got {s.shape} and {h.shape}")
    order = np.argsort(-s, kind="stable")
    out = []
    for c in coverages:
        if not 0.0 < c <= 1.0:
            raise ValueError(f"coverages must be in (0, 1], got {c}")
        n = math.ceil(c * s.size - 1e-9)
        out.append({"coverage": float(c), "n": n, "accuracy": float(h[order[:n]].mean())})
    return out


def metrics(probs: Sequence[np.ndarray], gold: Sequence[int], *, n_bins: int = 10, qtype: str = "choice",
            thresholds: Sequence[float] = THRESHOLDS) -> dict[str, Any]:
    """All metrics of one set of probabilities (formulas above). Score questions also get
    ``mae``, the mean |expected level − gold level|."""
    pred = [int(np.argmax(p)) for p in probs]
    k = len(probs[0])
    confusion = np.zeros((k, k), dtype=np.int64)  # (gold, predicted)
    for y, p in zip(gold, pred):
        confusion[y, p] += 1
    out: dict[str, Any] = {
        "n": len(probs), "accuracy": accuracy(probs, gold), "macro_f1": macro_f1(pred, gold),
        "nll": nll(probs, gold), "brier": brier(probs, gold), "ece": ece(probs, gold, n_bins),
        "ece_bins": n_bins, "mean_confidence": float(np.mean([np.max(p) for p in probs])),
    }
    if qtype == "score":
        levels = np.arange(k)
        out["mae"] = float(np.mean([abs(float(levels @ p) - y) for p, y in zip(probs, gold)]))
    out["confusion"] = confusion.tolist()
    out["reliability"] = reliability_bins(probs, gold, n_bins)
    out["risk_coverage"] = risk_coverage(probs, gold, thresholds)
    return out
