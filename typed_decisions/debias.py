"""Order debiasing: ask a question under several option orders and average the answers.

A model reading a list of options favours some positions (the first, the last, the letter "A"):
``evaluation/permutation.py`` measures it as the flip rate. ``debias="rotate"`` (a request field,
default off) removes most of it at a bounded cost: the question is asked once per order below, all
prompts share the state prefix (the engine computes it once; only the question suffixes are
added), and the option distributions — read per original option, so they need no re-ordering —
are averaged:

    choice  orders = the cyclic rotations σ_s(i) = (i + s) mod n (shown position i holds option
            σ_s(i)), for k = min(n, max_rotations) shifts s_j = ⌊j·n/k⌋, j = 0..k−1 (evenly spaced;
            s_0 = 0: the canonical order, below). Every option visits k evenly spaced positions.
    score   orders = the levels lowest first, then highest first (2 prompts). A cyclic rotation
            would make the ordinal list non-monotone ("Levels (lowest first): high, low, medium")
            and change the question; reversal keeps it ordinal and still moves each level's
            letter and position.
    noul    unchanged (yes/no are not listed as options).

    p̄(o) = (1/k) Σ_j p_j(o)            (p_j: the distribution of order j, in the original order)
    flip rate = share of the orders j ≥ 1 whose argmax differs from order 0's,
                the definition of permutation.py, so the two numbers compare.

``debias="canonical"`` asks a choice question once, its options shown in a canonical order: sorted
by the SHA-256 of each option's description (its name when it has none; ties by name), so the
prompt — and every probability — is a function of the option *set*, not of the order the caller
listed it in, at no extra cost. It does not remove position bias; it makes it the same for every
listing of the same options (the order is pseudo-random, uncorrelated with meaning, unlike an
alphabetical one). ``rotate`` starts its rotations from the same canonical order, so it is exactly
order-invariant too. A score's levels are ordered, so ``canonical`` shows them in one of their two
directions (``canonical_direction``: the same for a scale and its reversal) under a header that
names no direction ("Levels:"), in the letter label modes, where the labels carry no level
number; in ``names`` mode the labels are the level numbers, so the scale is shown as listed.

Numpy only; the compiler renders the orders, the decider averages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import get_args

import numpy as np
from numpy.typing import ArrayLike

from .readout import as_probabilities
from .schema import Debias

DEBIAS_MODES: tuple[str, ...] = get_args(Debias)
MAX_ROTATIONS = 8  # prompts per choice question under debias="rotate" (cost: k question suffixes)


def rotation_shifts(n: int, max_rotations: int = MAX_ROTATIONS) -> list[int]:
    """k = min(n, max_rotations) evenly spaced cyclic shifts ⌊j·n/k⌋, starting with 0.

    >>> rotation_shifts(3), rotation_shifts(20, 8), rotation_shifts(1)
    ([0, 1, 2], [0, 2, 5, 7, 10, 12, 15, 17], [0])
    """
    if n < 1:
        raise ValueError(f"a question needs at least one option, got n={n}")
    if max_rotations < 1:
        raise ValueError(f"max_rotations must be >= 1, got {max_rotations}")
    k = min(n, max_rotations)
    return [j * n // k for j in range(k)]


def rotated_order(n: int, shift: int) -> list[int]:
    """The option shown at each position after a cyclic shift: position i shows option (i + shift) mod n.

    >>> rotated_order(4, 1)
    [1, 2, 3, 0]
    """
    return [(i + shift) % n for i in range(n)]


def canonical_order(names: Sequence[str], descriptions: Sequence[str | None] | None = None) -> list[int]:
    """The canonical shown order of a choice's options: position i shows option order[i], the
    options sorted by (sha256(description, else name), name). The same option set gives the same
    order however it was listed.

    >>> canonical_order(["a", "b", "c"]) == [["a", "b", "c"].index(x) for x in sorted("abc", key=_digest)]
    True
    >>> names = ["refund", "bug", "other"]
    >>> [names[i] for i in canonical_order(names)] == [names[::-1][i] for i in canonical_order(names[::-1])]
    True
    """
    descs = list(descriptions) if descriptions is not None else [None] * len(names)
    if len(descs) != len(names):
        raise ValueError(f"{len(names)} names but {len(descs)} descriptions")
    keys = [(_digest(d if d is not None else n), n) for n, d in zip(names, descs)]
    return sorted(range(len(names)), key=keys.__getitem__)


def canonical_direction(descriptions: Sequence[str]) -> list[int]:
    """A score's canonical shown order in the letter label modes: its levels as listed or reversed,
    whichever lists the SHA-256 digests of their descriptions in the smaller sequence, so a scale
    and its reversal are shown alike (the compiler then names no direction: "Levels:").

    >>> a, b = canonical_direction(["low", "mid", "high"]), canonical_direction(["high", "mid", "low"])
    >>> [["low", "mid", "high"][i] for i in a] == [["high", "mid", "low"][i] for i in b]
    True
    """
    digests = [_digest(d) for d in descriptions]
    forward = list(range(len(digests)))
    return forward if digests <= digests[::-1] else forward[::-1]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def question_orders(qtype: str, n: int, debias: Debias, max_rotations: int = MAX_ROTATIONS,
                    base: Sequence[int] | None = None) -> list[list[int]]:
    """The option orders one question is asked in. The first is the order as listed (``none``),
    or ``base`` under ``canonical`` (a choice's ``canonical_order``, a score's
    ``canonical_direction``; the listed order when not given) and for a choice under ``rotate``,
    whose other orders are cyclic rotations of the first (a score's: its reversal).

    >>> question_orders("choice", 3, "rotate"), question_orders("score", 3, "rotate")
    ([[0, 1, 2], [1, 2, 0], [2, 0, 1]], [[0, 1, 2], [2, 1, 0]])
    >>> question_orders("choice", 3, "none"), question_orders("noul", 2, "rotate")
    ([[0, 1, 2]], [[0, 1]])
    >>> question_orders("choice", 3, "canonical", base=[2, 0, 1]), question_orders("score", 3, "canonical", base=[2, 1, 0])
    ([[2, 0, 1]], [[2, 1, 0]])
    >>> question_orders("choice", 3, "rotate", base=[2, 0, 1])
    [[2, 0, 1], [0, 1, 2], [1, 2, 0]]
    """
    if debias not in DEBIAS_MODES:
        raise ValueError(f"debias must be one of {', '.join(DEBIAS_MODES)}, got {debias!r}")
    identity = list(range(n))
    if debias == "none" or qtype == "noul" or n == 1:
        return [identity]
    first = identity if base is None else list(base)
    if sorted(first) != identity:
        raise ValueError(f"base must be a permutation of 0..{n - 1}, got {first}")
    if debias == "canonical":
        return [first]
    if qtype == "score":  # rotate: both directions of the listed scale
        return [identity, identity[::-1]] if max_rotations >= 2 else [identity]
    return [[first[i] for i in rotated_order(n, s)] for s in rotation_shifts(n, max_rotations)]


def to_original(shown_probs: ArrayLike, order: Sequence[int]) -> np.ndarray:
    """Map a distribution over shown positions back to the listed order: p[order[i]] = q[i].

    >>> to_original([0.7, 0.2, 0.1], [1, 2, 0]).tolist()
    [0.1, 0.7, 0.2]
    """
    q = as_probabilities(shown_probs)
    if sorted(order) != list(range(q.size)):
        raise ValueError(f"order must be a permutation of 0..{q.size - 1}, got {list(order)}")
    p = np.empty_like(q)
    p[np.asarray(order, dtype=np.intp)] = q
    return p


def average(dists: Sequence[ArrayLike]) -> np.ndarray:
    """p̄ = (1/k) Σ_j p_j (each p_j validated; the mean of distributions is one).

    >>> average([[0.8, 0.2], [0.4, 0.6]]).round(12).tolist()
    [0.6, 0.4]
    """
    if not dists:
        raise ValueError("no distributions to average")
    ps = [as_probabilities(p) for p in dists]
    if len({p.shape for p in ps}) != 1:
        raise ValueError(f"distributions of different lengths: {[p.size for p in ps]}")
    stack = np.stack(ps)  # (k, n)
    mean = stack.mean(axis=0)
    return mean / mean.sum()


def flip_rate(dists: Sequence[ArrayLike]) -> float:
    """Share of the orders after the first whose argmax differs from the first's (0 for one order).

    >>> flip_rate([[0.6, 0.4], [0.3, 0.7], [0.9, 0.1]])
    0.5
    """
    if len(dists) < 2:
        return 0.0
    first = int(np.argmax(as_probabilities(dists[0])))
    return float(np.mean([int(np.argmax(as_probabilities(p))) != first for p in dists[1:]]))


__all__ = [
    "DEBIAS_MODES",
    "MAX_ROTATIONS",
    "Debias",
    "average",
    "canonical_direction",
    "canonical_order",
    "flip_rate",
    "question_orders",
    "rotated_order",
    "rotation_shifts",
    "to_original",
]
