"""Permutation harness: how much do option probabilities depend on the order options are shown in?

A labelled-options prompt can carry position bias (the first option, or "A", gets extra mass).
This tool re-asks one question with the options shuffled, maps every answer back to the original
order, and compares with the identity order. It is evaluation tooling: it calls a user function
`probs_for(options_in_order) -> probabilities aligned with that order` and knows nothing of the
engine.

For a permutation pi (shown[j] = options[pi[j]]) with returned q (aligned with `shown`), the
probabilities in the original order are  p_pi[pi[j]] = q[j].  Against the identity order p_id:

    agreement  = (1/K) sum_pi [argmax p_pi == argmax p_id]       flip rate = 1 - agreement
    TV(pi)     = (1/2) sum_i |p_pi[i] - p_id[i]|                 mean and max over the K permutations

Permutations: all n! - 1 non-identity orders when there are at most k of them (exhaustive,
deterministic), otherwise k distinct non-identity orders drawn with numpy's default_rng(seed).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

from ..readout import as_probabilities

__all__ = ["PermutationReport", "permutation_report", "draw_permutations"]

T = TypeVar("T")


@dataclass(frozen=True)
class PermutationReport:
    """Result of `permutation_report`; probabilities are in the original option order."""

    permutations: list[tuple[int, ...]]  # K orders, shown[j] = options[perm[j]]
    identity_probs: np.ndarray  # (n,)
    permuted_probs: np.ndarray  # (K, n), mapped back to the original order
    agreement: float
    flip_rate: float
    mean_tv: float
    max_tv: float

    @property
    def mean_probs(self) -> np.ndarray:
        """Average over the identity and all K orders: a position-debiased estimate, (n,)."""
        return np.vstack([self.identity_probs[None], self.permuted_probs]).mean(axis=0)


def draw_permutations(n: int, k: int, seed: int = 0) -> list[tuple[int, ...]]:
    """k distinct non-identity permutations of range(n) (all of them if there are at most k).

    >>> draw_permutations(3, 10)
    [(0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
    """
    if n < 1 or k < 1:
        raise ValueError(f"need n >= 1 and k >= 1, got n={n}, k={k}")
    identity = tuple(range(n))
    if math.factorial(n) - 1 <= k:
        return [p for p in itertools.permutations(range(n)) if p != identity]
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, ...]] = {identity}
    out: list[tuple[int, ...]] = []
    while len(out) < k:  # n! - 1 > k, so this terminates; rejections are rare for n >= 5
        p = tuple(int(x) for x in rng.permutation(n))
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def _check(q: ArrayLike, n: int, order: tuple[int, ...]) -> np.ndarray:
    """``probs_for``'s answer as n validated probabilities; the error names the order asked."""
    try:
        a = as_probabilities(q)
        if a.size != n:
            raise ValueError(f"got {a.size} probabilities")
    except ValueError as e:
        raise ValueError(f"probs_for returned {np.asarray(q).tolist()} for order {order}; expected {n} "
                         f"probabilities summing to 1 ({e})") from None
    return a


def permutation_report(
    probs_for: Callable[[list[T]], ArrayLike], options: Sequence[T], k: int = 20, seed: int = 0
) -> PermutationReport:
    """Evaluate probs_for under the identity order and k permutations; compare (formulas above).

    >>> rep = permutation_report(lambda opts: [0.6, 0.3, 0.1], ["a", "b", "c"])  # always favours slot 0
    >>> len(rep.permutations), rep.agreement, round(rep.max_tv, 6)
    (5, 0.2, 0.5)
    """
    opts = list(options)
    n = len(opts)
    p_id = _check(probs_for(list(opts)), n, tuple(range(n)))  # (n,)
    perms = draw_permutations(n, k, seed) if n > 1 else []
    mapped = np.empty((len(perms), n), dtype=np.float64)  # (K, n)
    for r, perm in enumerate(perms):
        q = _check(probs_for([opts[i] for i in perm]), n, perm)  # (n,) aligned with shown order
        mapped[r, list(perm)] = q  # p_pi[pi[j]] = q[j]
    if len(perms) == 0:  # a single option cannot be permuted
        return PermutationReport([], p_id, mapped, 1.0, 0.0, 0.0, 0.0)
    agree = float(np.mean(mapped.argmax(axis=1) == p_id.argmax()))
    tv = 0.5 * np.abs(mapped - p_id[None]).sum(axis=1)  # (K,)
    return PermutationReport(
        permutations=perms,
        identity_probs=p_id,
        permuted_probs=mapped,
        agreement=agree,
        flip_rate=1.0 - agree,
        mean_tv=float(tv.mean()),
        max_tv=float(tv.max()),
    )
