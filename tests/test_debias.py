"""Order debiasing maths (debias.py): evenly spaced rotations, the mapping back, the mean, flips."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from typed_decisions.debias import (
    MAX_ROTATIONS,
    average,
    canonical_direction,
    canonical_order,
    flip_rate,
    question_orders,
    rotated_order,
    rotation_shifts,
    to_original,
)


@pytest.mark.parametrize("n", range(1, 40))
def test_rotation_shifts_are_distinct_evenly_spaced_and_capped(n):
    shifts = rotation_shifts(n)
    k = min(n, MAX_ROTATIONS)
    assert len(shifts) == len(set(shifts)) == k and shifts[0] == 0
    assert all(0 <= s < n for s in shifts)
    gaps = np.diff(shifts + [n])  # around the circle
    assert gaps.max() - gaps.min() <= 1  # as even as integers allow


def test_every_option_visits_k_distinct_positions():
    n = 5
    orders = question_orders("choice", n, "rotate")
    positions = {j: {order.index(j) for order in orders} for j in range(n)}
    assert all(len(p) == n for p in positions.values())  # k = n: every position once
    assert sorted(orders[1]) == list(range(n)) and orders[0] == list(range(n))


def test_score_is_asked_both_ways_and_noul_once():
    assert question_orders("score", 4, "rotate") == [[0, 1, 2, 3], [3, 2, 1, 0]]
    assert question_orders("noul", 2, "rotate") == [[0, 1]]
    assert question_orders("choice", 4, "none") == [[0, 1, 2, 3]]
    assert question_orders("choice", 4, "rotate", max_rotations=1) == [[0, 1, 2, 3]]


def test_to_original_inverts_the_rotation():
    rng = np.random.default_rng(0)
    n = 6
    p = rng.dirichlet(np.ones(n))                 # the model's belief about the options
    for s in range(n):
        order = rotated_order(n, s)
        shown = p[order]                           # what a position-faithful reader reports per position
        np.testing.assert_allclose(to_original(shown, order), p, rtol=0, atol=0)


def test_average_and_flip_rate_hand_values():
    d = [[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.5, 0.1, 0.4], [0.1, 0.1, 0.8]]
    np.testing.assert_allclose(average(d), [0.35, 0.3, 0.35])
    assert flip_rate(d) == pytest.approx(2 / 3)   # orders 2 and 4 pick another option than order 1
    assert flip_rate(d[:1]) == 0.0


@pytest.mark.parametrize("bad", [lambda: rotation_shifts(0), lambda: rotation_shifts(3, 0),
                                 lambda: question_orders("choice", 3, "shuffle"),  # type: ignore[arg-type]
                                 lambda: to_original([0.5, 0.5], [0, 0]),
                                 lambda: average([[0.5, 0.5], [1.0]]), lambda: average([])])
def test_bad_input_is_refused(bad):
    with pytest.raises(ValueError):
        bad()


@pytest.mark.parametrize("n", [2, 3, 5, 9])
def test_canonical_order_is_a_function_of_the_option_set(n):
    """Any listing of the same (name, description) pairs is shown in the same sequence."""
    rng = np.random.default_rng(n)
    names = [f"opt{i}" for i in range(n)]
    descs = [None if i % 3 == 0 else f"description {i}" for i in range(n)]
    shown = [names[j] for j in canonical_order(names, descs)]
    for _ in range(10):
        p = rng.permutation(n)
        ns, ds = [names[j] for j in p], [descs[j] for j in p]
        order = canonical_order(ns, ds)
        assert sorted(order) == list(range(n)) and [ns[j] for j in order] == shown


def test_canonical_order_sorts_by_the_description_digest_then_the_name():
    digest = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    names, descs = ["b", "a", "c"], ["same", "same", None]  # a, b share a description: the name decides
    want = sorted(range(3), key=lambda j: (digest(descs[j] if descs[j] is not None else names[j]), names[j]))
    assert canonical_order(names, descs) == want and want.index(1) < want.index(0)
    with pytest.raises(ValueError, match="2 names but 1 descriptions"):
        canonical_order(["a", "b"], ["x"])


@pytest.mark.parametrize("levels", [["low", "mid", "high"], ["a", "b"], ["x", "y", "x"], ["no", "some", "many", "all"]])
def test_canonical_direction_is_the_same_for_a_scale_and_its_reversal(levels):
    up, down = canonical_direction(levels), canonical_direction(levels[::-1])
    assert up in (list(range(len(levels))), list(range(len(levels)))[::-1])
    assert [levels[i] for i in up] == [levels[::-1][i] for i in down]


def test_canonical_and_rotate_start_from_the_base_order():
    base = [2, 0, 3, 1]
    assert question_orders("choice", 4, "canonical", base=base) == [base]
    rot = question_orders("choice", 4, "rotate", base=base)
    assert rot[0] == base and rot[1] == [0, 3, 1, 2] and len(rot) == 4
    assert question_orders("score", 3, "canonical") == [[0, 1, 2]]  # no base (names mode): as listed
    assert question_orders("score", 3, "canonical", base=[2, 1, 0]) == [[2, 1, 0]]
    assert question_orders("score", 3, "rotate", base=[2, 1, 0]) == [[0, 1, 2], [2, 1, 0]]
    assert question_orders("choice", 4, "none", base=base) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="base must be a permutation"):
        question_orders("choice", 3, "canonical", base=[0, 0, 1])
