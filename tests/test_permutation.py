"""Permutation harness: known flip rate for a position-biased fake, TV = 0 for an invariant one."""

import math

import numpy as np
import pytest

from typed_decisions.evaluation.permutation import draw_permutations, permutation_report


def position_biased(shown):
    """Ignores the content: slot 0 always gets 0.6, then 0.3, 0.1, ... (a pure position bias)."""
    w = np.array([2.0 ** -i for i in range(len(shown))])
    w[0] *= 3
    return w / w.sum()


WEIGHTS = {"billing": 5.0, "tech": 3.0, "sales": 1.0, "legal": 0.5, "hr": 0.25, "ops": 0.25}


def content_only(shown):
    """Depends only on which option sits where: invariant after mapping back."""
    w = np.array([WEIGHTS[o] for o in shown])
    return w / w.sum()


def test_exhaustive_position_bias_known_rates():
    opts = ["billing", "tech", "sales"]
    rep = permutation_report(position_biased, opts, k=20)
    assert len(rep.permutations) == 5  # 3! - 1 non-identity orders
    # argmax follows whatever is shown first: agrees only for (0, 2, 1)
    assert rep.agreement == pytest.approx(1 / 5) and rep.flip_rate == pytest.approx(4 / 5)
    # averaging over all 6 orders removes a pure position bias
    np.testing.assert_allclose(rep.mean_probs, [1 / 3] * 3, rtol=1e-12)
    p = position_biased(opts)  # identity
    tv_manual = []
    for perm in rep.permutations:
        back = np.empty(3)
        back[list(perm)] = p
        tv_manual.append(0.5 * np.abs(back - p).sum())
    assert rep.mean_tv == pytest.approx(np.mean(tv_manual)) and rep.max_tv == pytest.approx(max(tv_manual))
    assert rep.max_tv > 0.3


def test_sampled_position_bias_flip_rate_matches_permutations():
    opts = list(WEIGHTS)
    rep = permutation_report(position_biased, opts, k=40, seed=7)
    assert len(rep.permutations) == 40 and len(set(rep.permutations)) == 40
    assert tuple(range(6)) not in rep.permutations
    want = np.mean([perm[0] != 0 for perm in rep.permutations])  # first slot moved -> argmax flips
    assert rep.flip_rate == pytest.approx(want)
    assert 0.6 < rep.flip_rate < 1.0  # ~5/6 in expectation


def test_invariant_function_has_zero_tv():
    rep = permutation_report(content_only, list(WEIGHTS), k=30, seed=1)
    assert rep.agreement == 1.0 and rep.flip_rate == 0.0
    assert rep.mean_tv == pytest.approx(0.0, abs=1e-15) and rep.max_tv == pytest.approx(0.0, abs=1e-15)
    np.testing.assert_allclose(rep.permuted_probs, np.tile(rep.identity_probs, (30, 1)), atol=1e-15)


def test_mapping_back_uses_the_inverse_permutation():
    # content-dependent *and* asymmetric: if q were mapped with perm instead of its inverse, TV > 0
    rep = permutation_report(content_only, ["billing", "tech", "sales", "legal"], k=100)
    assert len(rep.permutations) == math.factorial(4) - 1
    assert rep.max_tv == pytest.approx(0.0, abs=1e-15)


def test_seeded_and_reproducible():
    assert draw_permutations(6, 10, seed=3) == draw_permutations(6, 10, seed=3)
    assert draw_permutations(6, 10, seed=3) != draw_permutations(6, 10, seed=4)
    assert draw_permutations(3, 10) == [(0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]


def test_single_option_and_bad_outputs():
    rep = permutation_report(lambda shown: [1.0], ["only"])
    assert rep.permutations == [] and rep.agreement == 1.0 and rep.max_tv == 0.0
    with pytest.raises(ValueError, match="summing to 1"):
        permutation_report(lambda shown: [0.5, 0.6], ["a", "b"])
    with pytest.raises(ValueError, match="expected 2"):
        permutation_report(lambda shown: [1.0], ["a", "b"])
