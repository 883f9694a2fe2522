"""Letter label plans: distinct fixed-width labels, minimal capacity, published readout counts."""

import numpy as np
import pytest

from typed_decisions.letters import ALPHABET, letter_labels, letter_plan, plan_readouts
from typed_decisions.readout import LabelTrie, readout_count

PUBLISHED = {63: 4, 67: 3, 100: 3, 677: 18, 3844: 63}


def test_alphabet():
    assert ALPHABET == "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize("n, readouts", sorted(PUBLISHED.items()))
def test_published_readout_counts(n, readouts):
    plan = letter_plan(n)
    assert plan.readouts == readouts
    assert _trie_readouts(plan.labels) == readouts


def test_published_radices():
    assert letter_plan(63).radices == (3, 21)
    assert letter_plan(67).radices == (2, 34)
    assert letter_plan(677).radices == (17, 40)
    assert letter_plan(3844).radices == (62, 62)


def test_single_characters_up_to_62():
    assert letter_labels(1) == ["A"]
    assert letter_labels(5) == ["A", "B", "C", "D", "E"]
    assert letter_labels(62) == list(ALPHABET)
    assert letter_plan(62).readouts == 1


def test_mixed_radix_order():
    labels = letter_labels(63)  # radices (3, 21)
    assert labels[:2] == ["AA", "AB"] and labels[20:22] == ["AU", "BA"] and labels[-1] == "CU"


def _trie_readouts(labels):
    """Independent count: build the character trie and count its internal nodes."""
    paths = [[ALPHABET.index(c) for c in lab] for lab in labels]
    return readout_count(LabelTrie.build(paths, list(range(len(labels)))))


def _min_capacity(n, w):
    """Smallest c >= n that splits into w factors each <= 62 (divisor search, no enumeration of radices)."""

    def splits(c, w):
        if w == 1:
            return c <= 62
        return any(c % d == 0 and splits(c // d, w - 1) for d in range(1, 63))

    c = n
    while not splits(c, w):
        c += 1
    return c


def _brute_readouts(n, radices):
    """Distinct prefixes of each length among the first n mixed-radix numbers, counted by np.unique."""
    k = np.arange(n)
    total = 0
    for d in range(len(radices)):
        block = int(np.prod(radices[d:]))
        total += len(np.unique(k // block))
    return total


def _all_factorizations(c, w):
    if w == 1:
        return [(c,)] if c <= 62 else []
    return [(d, *rest) for d in range(1, 63) if c % d == 0 for rest in _all_factorizations(c // d, w - 1)]


def test_plans_1_to_1000_against_brute_force():
    for n in range(1, 1001):
        plan = letter_plan(n)
        w = 1 if n <= 62 else 2
        assert plan.width == w and len(plan.radices) == w
        labels = plan.labels
        assert len(labels) == n and len(set(labels)) == n
        assert all(len(lab) == w for lab in labels)
        for i, r in enumerate(plan.radices):
            assert 1 <= r <= 62
            assert {lab[i] for lab in labels} <= set(ALPHABET[:r])
        assert labels == sorted(labels, key=lambda s: [ALPHABET.index(c) for c in s])
        cap = _min_capacity(n, w)
        assert plan.capacity == cap, n
        best = min(_brute_readouts(n, f) for f in _all_factorizations(cap, w))
        assert plan.readouts == best == _brute_readouts(n, plan.radices), n
        if n % 37 == 0 or n in PUBLISHED:
            assert _trie_readouts(labels) == plan.readouts


@pytest.mark.parametrize("n", [3845, 3900, 5000, 7919, 10000])
def test_width_three_against_brute_force(n):
    plan = letter_plan(n)
    assert plan.width == 3
    cap = _min_capacity(n, 3)
    assert plan.capacity == cap
    best = min(_brute_readouts(n, f) for f in _all_factorizations(cap, 3))
    assert plan.readouts == best
    assert len(set(plan.labels)) == n and {len(s) for s in plan.labels} == {3}
    assert _trie_readouts(plan.labels) == plan.readouts


def test_plan_readouts_formula():
    assert plan_readouts(63, (3, 21)) == 4
    assert plan_readouts(3783, (62, 62)) == 63  # the last prefix holds one label but is still used
    assert plan_readouts(10, (10,)) == 1


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, 62**4 + 1])
def test_invalid_counts(bad):
    with pytest.raises(ValueError):
        letter_plan(bad)
