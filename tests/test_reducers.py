"""Reducers: paper numbers, tie rule, the three confidences at their hand-computed values."""

import math
import typing

import numpy as np
import pytest

from typed_decisions.readout import restricted_softmax
from typed_decisions.reducers import (
    DEFAULT_CONFIDENCE,
    ConfidenceKind,
    confidence,
    reduce_choice,
    reduce_noul,
    reduce_score,
)

KINDS = typing.get_args(ConfidenceKind)


def test_kinds_and_default():
    assert KINDS == ("typesafe", "bonsai", "entropy")
    assert DEFAULT_CONFIDENCE == "typesafe"


def test_paper_worked_example():
    p = restricted_softmax([2.1, 0.9, -0.1])
    np.testing.assert_allclose(p.round(4), [0.7082, 0.2133, 0.0785])
    assert round(confidence(p, "bonsai"), 4) == 0.5134
    # typesafe by hand: (3 * 0.708225 - 1) / 2
    assert confidence(p, "typesafe") == pytest.approx((3 * p.max() - 1) / 2, rel=1e-15)
    a = reduce_choice(p, ["billing", "tech", "sales"], confidence_kind="bonsai")
    assert a.choice == "billing" and round(a.confidence, 4) == 0.5134


def test_paper_score_example():
    a = reduce_score([0.0, 0.57, 0.43], ["low", "medium", "high"])
    assert a.score == pytest.approx(1.43, abs=1e-12)
    assert a.legend == {"0": "low", "1": "medium", "2": "high"}
    assert a.probabilities == {"0": 0.0, "1": 0.57, "2": 0.43}
    assert a.model_dump()["score"] == a.score


def test_choice_ties_go_to_first_listed():
    a = reduce_choice([0.4, 0.2, 0.4], ["x", "y", "z"])
    assert a.choice == "x"
    assert a.probabilities == {"x": 0.4, "y": 0.2, "z": 0.4}
    assert reduce_choice([0.2, 0.4, 0.4], ["x", "y", "z"]).choice == "y"


@pytest.mark.parametrize(
    "p, kind, want",
    [
        ([0.5, 0.5], "typesafe", 0.0),
        ([0.5, 0.5], "bonsai", 0.25),
        ([0.5, 0.5], "entropy", 0.0),
        ([0.25] * 4, "typesafe", 0.0),
        ([0.25] * 4, "bonsai", 0.25 * 0.75**3),
        ([1.0, 0.0, 0.0], "typesafe", 1.0),
        ([1.0, 0.0, 0.0], "bonsai", 1.0),
        ([1.0, 0.0, 0.0], "entropy", 1.0),
        ([0.5, 0.5, 0.0], "typesafe", 0.25),  # (3 * .5 - 1) / 2
        ([0.5, 0.5, 0.0], "entropy", 1 - math.log(2) / math.log(3)),
        ([0.6, 0.3, 0.1], "bonsai", 0.6 * 0.7 * 0.9),
        ([1.0], "typesafe", 1.0),
        ([1.0], "bonsai", 1.0),
        ([1.0], "entropy", 1.0),
    ],
)
def test_confidence_values(p, kind, want):
    assert confidence(p, kind) == pytest.approx(want, abs=1e-12)


def test_confidence_in_unit_interval_and_typesafe_ranks_like_pmax():
    rng = np.random.default_rng(3)
    for _ in range(300):
        k = int(rng.integers(1, 8))
        p = rng.dirichlet(np.full(k, 0.5))
        for kind in KINDS:
            assert 0.0 <= confidence(p, kind) <= 1.0
        q = rng.dirichlet(np.full(k, 0.5))
        if abs(p.max() - q.max()) > 1e-9:
            assert (confidence(p) > confidence(q)) == (p.max() > q.max())


def test_noul():
    a = reduce_noul([0.8, 0.2])
    assert a.noul == 0.8
    assert reduce_noul([0.3, 0.7]).model_dump() == {"type": "noul", "noul": 0.3}
    with pytest.raises(ValueError, match="2 options"):
        reduce_noul([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda: confidence([0.5, 0.5], "max"), "one of"),
        (lambda: confidence([0.5, 0.6]), "sum to 1"),
        (lambda: confidence([1.5, -0.5]), ">= 0"),
        (lambda: reduce_choice([0.5, 0.5], ["a"]), "2 probabilities for 1 options"),
        (lambda: reduce_choice([0.5, 0.5], ["a", "a"]), "distinct"),
        (lambda: reduce_score([1.0], ["a", "b"]), "1 probabilities for 2 levels"),
        (lambda: reduce_score([], []), "non-empty"),
    ],
)
def test_invalid(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
