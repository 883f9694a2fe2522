"""Letter label plans: which short strings label the options of a choice question.

Options are shown to the model as "A. ...", "B. ..." (``question_block.question_block``) and read back
through the logits of their labels. The alphabet is the 62 symbols A-Z a-z 0-9, in that order. This file only plans strings and
counts readouts at the character level; turning the strings into token paths (and a trie) is the
job of the labels/readout code. Its neighbour `readout.py` does the maths on the resulting trie.

The rule (Bonsai-Llama-Jev's letter plan):

- n <= 62: one character per option, "A".."Z","a".."z","0".."9"; 1 readout.
- n > 62: a fixed width w, the smallest with 62**w >= n. Position i draws from the first r_i
  symbols of the alphabet (r_i <= 62). Labels are the first n numbers in mixed radix
  (r_1, ..., r_w), most significant position first. The radices minimise the capacity
  prod_i r_i >= n; ties are broken by fewest readouts, then by the lexicographically smallest
  radices.

Readouts = internal nodes of the character trie actually used by the first n labels:

    readouts = sum_{d=0}^{w-1} ceil(n / (r_{d+1} * ... * r_w))      (the d = 0 term is the root, 1)

which is 1 + r_1 + r_1 r_2 + ... when every prefix is used. Published values this reproduces:
63 -> 3x21 -> 1+3 = 4;  67 -> 2x34 = 68 -> 1+2 = 3;  100 -> 2x50 -> 3;
677 -> 17x40 = 680 -> 1+17 = 18;  3844 -> 62x62 -> 1+62 = 63.

Search. For a fixed prefix (r_1..r_{w-1}), each r_i in 1..62, the best last radix is
r_w = ceil(n / prod), so only 62**(w-1) prefixes are enumerated (vectorised): 62 for w = 2, 3,844
for w = 3 (n <= 238,328), 238,328 for w = 4 (n <= 14,776,336). Larger n is refused: no prompt holds
that many options.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["ALPHABET", "LetterPlan", "letter_plan", "letter_labels", "plan_readouts"]

ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits  # 62 symbols
BASE = len(ALPHABET)
MAX_WIDTH = 4  # 62**4 = 14,776,336 options


@dataclass(frozen=True)
class LetterPlan:
    """A letter label plan for n options.

    radices[i] is the number of symbols used at position i (the first radices[i] of ALPHABET);
    labels[k] is the label of option k; readouts is the number of trie nodes that need logits.
    """

    n: int
    width: int
    radices: tuple[int, ...]
    labels: list[str]
    readouts: int

    @property
    def capacity(self) -> int:
        return int(np.prod(self.radices, dtype=np.int64))


def plan_readouts(n: int, radices: tuple[int, ...]) -> int:
    """sum_{d=0}^{w-1} ceil(n / prod(radices[d:])): used internal nodes of the first n labels.

    The labels with a given prefix of length d form one block of prod(radices[d:]) consecutive
    numbers, so the first n numbers touch ceil(n / block) distinct prefixes at depth d.

    >>> plan_readouts(63, (3, 21)), plan_readouts(67, (2, 34)), plan_readouts(3844, (62, 62))
    (4, 3, 63)
    """
    total, block = 0, 1
    for r in reversed(radices):  # block = prod(radices[d:]) for d = w-1, ..., 0
        block *= r
        total += -(-n // block)
    return total


def _labels(n: int, radices: tuple[int, ...]) -> list[str]:
    """The first n mixed-radix numbers in radices, most significant digit first, as strings."""
    k = np.arange(n, dtype=np.int64)  # (n,)
    digits = []
    for r in reversed(radices):
        digits.append(k % r)
        k = k // r
    assert (k == 0).all(), "n exceeds the capacity of the radices"
    cols = [np.array(list(ALPHABET))[d] for d in reversed(digits)]  # w arrays of (n,) symbols
    return ["".join(chars) for chars in zip(*cols)]


@lru_cache(maxsize=256)
def _best_radices(n: int, w: int) -> tuple[int, ...]:
    """Minimise (capacity, readouts, radices) over r_1..r_w in 1..62 with prod >= n."""
    if w == 1:
        return (n,)
    grids = np.meshgrid(*([np.arange(1, BASE + 1, dtype=np.int64)] * (w - 1)), indexing="ij")
    prefix = [g.ravel() for g in grids]  # w-1 arrays of (62**(w-1),) candidate radices
    head = np.prod(prefix, axis=0)  # (m,) prod r_1..r_{w-1}
    last = -(-n // head)  # (m,) smallest r_w reaching n for that prefix
    ok = last <= BASE
    rad = np.stack([*(p[ok] for p in prefix), last[ok]], axis=1)  # (m_ok, w)
    cap = head[ok] * last[ok]  # (m_ok,)
    keep = cap == cap.min()
    rad = rad[keep]
    # readouts for the surviving (few) candidates, then the lexicographic tie-break
    best = min((plan_readouts(n, tuple(int(x) for x in r)), tuple(int(x) for x in r)) for r in rad)
    return best[1]


def letter_plan(n: int) -> LetterPlan:
    """Plan labels for n options.

    >>> p = letter_plan(63)
    >>> p.radices, p.readouts, p.labels[:3], p.labels[-1]
    ((3, 21), 4, ['AA', 'AB', 'AC'], 'CU')
    >>> letter_plan(3).labels
    ['A', 'B', 'C']
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the number of options must be an integer >= 1, got {n!r}")
    n = int(n)
    if n > BASE**MAX_WIDTH:
        raise ValueError(f"{n} options is more than letter labels support ({BASE**MAX_WIDTH}); split the question")
    w = 1
    while BASE**w < n:
        w += 1
    radices = _best_radices(n, w)
    return LetterPlan(n=n, width=w, radices=radices, labels=_labels(n, radices), readouts=plan_readouts(n, radices))


def letter_labels(n: int) -> list[str]:
    """The labels of letter_plan(n), in option order.

    >>> letter_labels(64)[:2], letter_labels(64)[-1]
    (['AA', 'AB'], 'Bf')
    """
    return letter_plan(n).labels
