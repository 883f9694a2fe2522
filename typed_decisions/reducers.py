"""Reducers: from option probabilities to typed answers (choice, score, noul).

`readout.py` ends with a probability vector p over the listed options (sum 1, float64). This file
turns it into the answer a client sees; it is the one place where the wire format is written on the
way out. Pure functions, numpy only.

    choice   option  = options[argmax_i p_i]  (ties -> the first listed),  probabilities, confidence
    score    score   = sum_i i * p_i  over levels indexed 0..k-1,  probabilities {"0": p_0, ...},
             legend  = {"0": level_0, ...},  confidence
    noul     p_yes   = p_0 with options ordered (yes, no)

Confidence, k = number of options, p* = max_i p_i (three formulas, one default):

    "typesafe"  (k p* - 1) / (k - 1)            k = 1 -> 1.0
                Source: TypeSafe's published formula, the one the hosted System One API returns.
                It is the max probability rescaled so that uniform -> 0 and certain -> 1.
    "bonsai"    p* * prod_{i != *} (1 - p_i)
                Source: Bonsai-Llama-Jev's System One task (SYSTEMONE.md). The probability that
                the winner is "on" and every other option "off" if each were an independent coin.
    "entropy"   1 - H(p) / ln k,  H(p) = -sum_i p_i ln p_i (0 ln 0 = 0),   k = 1 -> 1.0
                Source: normalized Shannon entropy, the textbook uncertainty measure; uses the
                whole distribution, not only the winner.

The default is "typesafe": it is what the hosted System One API publishes, so a client that moves
between the hosted API and this runtime reads the same number with the same meaning. It is also
affine in p*, so it ranks answers exactly as p* does.

Worked example (the paper's): logits [2.1, 0.9, -0.1] -> p = [0.7082, 0.2133, 0.0785];
bonsai = 0.7082 * 0.7867 * 0.9215 = 0.5134; typesafe = (3 * 0.7082 - 1) / 2 = 0.5623.
Score example: p = [0, 0.57, 0.43] over levels 0..2 -> 0 * 0 + 1 * 0.57 + 2 * 0.43 = 1.43.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from .readout import as_probabilities
from .schema import ChoiceAnswer, Content, NoulAnswer, ScoreAnswer

__all__ = [
    "ConfidenceKind",
    "DEFAULT_CONFIDENCE",
    "confidence",
    "ChoiceAnswer",
    "ScoreAnswer",
    "NoulAnswer",
    "reduce_choice",
    "reduce_score",
    "reduce_noul",
]

ConfidenceKind = Literal["typesafe", "bonsai", "entropy"]
DEFAULT_CONFIDENCE: ConfidenceKind = "typesafe"


# -----------------------------------------------------------------------------
# confidence


def _typesafe(p: np.ndarray) -> float:
    k = p.size
    return 1.0 if k == 1 else float((k * p.max() - 1.0) / (k - 1))


def _bonsai(p: np.ndarray) -> float:
    s = int(np.argmax(p))
    others = np.delete(p, s)  # (k-1,)
    return float(p[s] * np.prod(1.0 - others))


def _entropy(p: np.ndarray) -> float:
    k = p.size
    if k == 1:
        return 1.0
    nz = p[p > 0]
    h = float(-(nz * np.log(nz)).sum())  # 0 ln 0 = 0
    return 1.0 - h / np.log(k)


_CONFIDENCE = {"typesafe": _typesafe, "bonsai": _bonsai, "entropy": _entropy}


def confidence(probs: ArrayLike, kind: ConfidenceKind = DEFAULT_CONFIDENCE) -> float:
    """One number in [0, 1] saying how decided the distribution is (formulas in the module docstring).

    >>> p = [0.7082, 0.2133, 0.0785]
    >>> round(confidence(p, "typesafe"), 4), round(confidence(p, "bonsai"), 4), round(confidence(p, "entropy"), 4)
    (0.5623, 0.5134, 0.2958)
    """
    if kind not in _CONFIDENCE:
        raise ValueError(f"confidence must be one of {sorted(_CONFIDENCE)}, got {kind!r}")
    c = _CONFIDENCE[kind](as_probabilities(probs))
    return float(min(1.0, max(0.0, c)))  # clip rounding noise such as -1e-17


# -----------------------------------------------------------------------------
# answers: the wire models of schema.py, written here and nowhere else


def reduce_choice(
    probs: ArrayLike, options: Sequence[str], confidence_kind: ConfidenceKind = DEFAULT_CONFIDENCE
) -> ChoiceAnswer:
    """option = options[argmax p] (np.argmax returns the first of tied maxima = first listed).

    >>> a = reduce_choice([0.25, 0.5, 0.25], ["billing", "tech", "sales"])
    >>> a.choice, a.probabilities["tech"], a.confidence
    ('tech', 0.5, 0.25)
    """
    p = as_probabilities(probs)
    if len(options) != p.size:
        raise ValueError(f"got {p.size} probabilities for {len(options)} options")
    if len(set(options)) != len(options):
        raise ValueError(f"option names must be distinct, got {list(options)}")
    return ChoiceAnswer(
        choice=options[int(np.argmax(p))],
        probabilities={o: float(x) for o, x in zip(options, p)},
        confidence=confidence(p, confidence_kind),
    )


def reduce_score(
    probs: ArrayLike, levels: Sequence[Content], confidence_kind: ConfidenceKind = DEFAULT_CONFIDENCE
) -> ScoreAnswer:
    """score = sum_i i * p_i with levels indexed 0..k-1; probabilities and legend keyed "0".."k-1".

    >>> a = reduce_score([0.0, 0.57, 0.43], ["low", "medium", "high"])
    >>> round(a.score, 2), a.legend["2"], a.probabilities["1"]
    (1.43, 'high', 0.57)
    """
    p = as_probabilities(probs)
    if len(levels) != p.size:
        raise ValueError(f"got {p.size} probabilities for {len(levels)} levels")
    idx = np.arange(p.size, dtype=np.float64)  # (k,) level values 0..k-1
    return ScoreAnswer(
        score=float(idx @ p),
        probabilities={str(i): float(x) for i, x in enumerate(p)},
        legend={str(i): level for i, level in enumerate(levels)},
        confidence=confidence(p, confidence_kind),
    )


def reduce_noul(probs: ArrayLike) -> NoulAnswer:
    """noul = p[0], options ordered (yes, no). No confidence: the wire answer carries none.

    >>> reduce_noul([0.8, 0.2]).noul
    0.8
    """
    p = as_probabilities(probs)
    if p.size != 2:
        raise ValueError(f"a noul question has 2 options (yes, no), got {p.size} probabilities")
    return NoulAnswer(noul=float(p[0]))
