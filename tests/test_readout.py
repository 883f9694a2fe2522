"""Readout maths: restricted softmax, trie rules, chain rule vs brute-force enumeration."""

import itertools

import numpy as np
import pytest

from typed_decisions.readout import (
    LabelTrie,
    label_mass,
    log_restricted_softmax,
    option_probabilities,
    path_log_probabilities,
    path_probabilities,
    readout_count,
    restricted_softmax,
    streaming_logsumexp,
)

# -----------------------------------------------------------------------------
# restricted softmax


def test_paper_numbers():
    p = restricted_softmax([2.1, 0.9, -0.1])
    assert p.dtype == np.float64
    np.testing.assert_allclose(p.round(4), [0.7082, 0.2133, 0.0785])


def test_matches_naive_softmax_and_is_shift_invariant():
    rng = np.random.default_rng(0)
    for _ in range(50):
        z = rng.normal(size=rng.integers(1, 9)) * 3
        naive = np.exp(z) / np.exp(z).sum()
        np.testing.assert_allclose(restricted_softmax(z), naive, rtol=1e-13, atol=0)
        np.testing.assert_allclose(restricted_softmax(z + 1234.5), naive, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(log_restricted_softmax(z), np.log(naive), rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("error")
def test_huge_and_minus_inf_logits():
    assert restricted_softmax([1e308, -1e308]).tolist() == [1.0, 0.0]
    assert restricted_softmax([1e300, 1e300]).tolist() == [0.5, 0.5]
    assert restricted_softmax([float("-inf"), 0.0, float("-inf")]).tolist() == [0.0, 1.0, 0.0]
    lp = log_restricted_softmax([float("-inf"), 0.0])
    assert lp[0] == -np.inf and lp[1] == 0.0
    p = restricted_softmax([1000.0, 999.0])
    np.testing.assert_allclose(p, [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1))], rtol=1e-14)


@pytest.mark.parametrize(
    "bad, msg",
    [
        ([float("-inf"), float("-inf")], "all logits are -inf"),
        ([0.0, float("nan")], "NaN"),
        ([0.0, float("inf")], r"\+inf"),
        ([], "non-empty"),
        ([[1.0, 2.0]], "1-D"),
    ],
)
def test_invalid_logits(bad, msg):
    with pytest.raises(ValueError, match=msg):
        restricted_softmax(bad)


# -----------------------------------------------------------------------------
# trie construction


def test_trie_nodes_bfs_sorted_children():
    t = LabelTrie.build([[9, 3, 1], [4], [9, 2], [9, 3, 0]], owners=[0, 1, 2, 2])
    assert t.internal_nodes() == [((), (4, 9)), ((9,), (2, 3)), ((9, 3), (0, 1))]
    assert readout_count(t) == 3
    assert t.depth == 3


def test_duplicate_path_names_both_owners():
    with pytest.raises(ValueError, match=r"duplicate label.*option 0.*option 2"):
        LabelTrie.build([[1, 2], [3], [1, 2]], owners=[0, 1, 2])


def test_prefix_path_names_both_and_says_what_to_do():
    with pytest.raises(ValueError, match=r"path 1 \(option 5\).*prefix of path 0 \(option 3\).*end-of-answer"):
        LabelTrie.build([[1, 2, 3], [1, 2]], owners=[3, 5])


@pytest.mark.parametrize(
    "paths, owners, msg",
    [
        ([[1], []], [0, 1], "empty"),
        ([[1]], [0, 1], "one owner per path"),
        ([], [], "at least one"),
        ([[-1]], [0], "negative token"),
        ([[1]], [-1], "option indices"),
    ],
)
def test_invalid_tries(paths, owners, msg):
    with pytest.raises(ValueError, match=msg):
        LabelTrie.build(paths, owners)


# -----------------------------------------------------------------------------
# chain rule


def _toy_logits(prefix, vocab, seed=0):
    """A fixed 'model': full-vocabulary logits as a deterministic function of the prefix."""
    rng = np.random.default_rng([seed, len(prefix), *prefix])
    return rng.normal(size=vocab) * 2.0  # (V,)


def _full_softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _toy_trie():
    # prefix-free paths of lengths 1..3 over vocab 0..5, several per option
    paths = [[0], [1, 2], [1, 3, 0], [1, 3, 4], [2, 5, 5], [2, 1], [5]]
    owners = [0, 1, 1, 2, 0, 3, 2]
    return LabelTrie.build(paths, owners), paths, owners


def test_chain_rule_matches_enumeration_of_full_sequences():
    """A model masked to the trie: P(path) = sum of P(sequence) over all full sequences starting with it."""
    vocab = 6
    trie, paths, _ = _toy_trie()
    depth = trie.depth

    def masked(prefix):
        z = _toy_logits(prefix, vocab)
        if prefix in trie.children:  # inside the trie, only children are allowed
            allowed = np.full(vocab, -np.inf)
            kids = list(trie.children[prefix])
            allowed[kids] = z[kids]
            return allowed
        return z  # after a label: any continuation

    seq_prob = {}
    for seq in itertools.product(range(vocab), repeat=depth):  # 6**3 full sequences
        pr = 1.0
        for k in range(depth):
            pr *= _full_softmax(masked(seq[:k]))[seq[k]]
        seq_prob[seq] = pr
    assert sum(seq_prob.values()) == pytest.approx(1.0, abs=1e-12)
    brute = [sum(pr for s, pr in seq_prob.items() if s[: len(p)] == tuple(p)) for p in paths]

    node_logits = {u: _toy_logits(u, vocab)[list(kids)] for u, kids in trie.children.items()}
    got = path_probabilities(trie, node_logits)
    np.testing.assert_allclose(got, brute, rtol=1e-12, atol=1e-15)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)


def test_chain_rule_matches_full_vocab_conditional_ratios():
    """Unmasked model: q(t|u) = softmax_V(z_u)[t] / sum_{c in C(u)} softmax_V(z_u)[c]."""
    vocab = 6
    trie, paths, _ = _toy_trie()
    want = []
    for p in paths:
        pr = 1.0
        for k in range(len(p)):
            u = tuple(p[:k])
            full = _full_softmax(_toy_logits(u, vocab, seed=1))
            pr *= full[p[k]] / full[list(trie.children[u])].sum()
        want.append(pr)
    node_logits = {u: _toy_logits(u, vocab, seed=1)[list(kids)] for u, kids in trie.children.items()}
    np.testing.assert_allclose(path_probabilities(trie, node_logits), want, rtol=1e-12)


def test_option_probabilities_hand_computed():
    # root children (5, 7) with logits (0, ln 3): q = (1/4, 3/4); node (7,) children (1, 2), q = (1/2, 1/2)
    t = LabelTrie.build([[5], [7, 1], [7, 2]], owners=[1, 0, 1])
    node_logits = {(): [0.0, np.log(3.0)], (7,): [0.0, 0.0]}
    np.testing.assert_allclose(path_probabilities(t, node_logits), [0.25, 0.375, 0.375], rtol=1e-15)
    np.testing.assert_allclose(option_probabilities(t, node_logits, 3), [0.375, 0.625, 0.0], rtol=1e-15)


def test_children_alignment_matters():
    """Logits are aligned with sorted child ids: reversing them must change the answer."""
    t = LabelTrie.build([[7], [3]], owners=[0, 1])  # children of root: (3, 7)
    p = option_probabilities(t, {(): [2.0, 0.0]}, 2)  # logit 2 belongs to token 3 = option 1
    assert p[1] > p[0]
    np.testing.assert_allclose(p, restricted_softmax([0.0, 2.0]))


def _random_prefix_free(rng, vocab=5, eos=99):
    n = int(rng.integers(1, 12))
    raw = {tuple(int(x) for x in rng.integers(0, vocab, size=rng.integers(1, 4))) for _ in range(n)}
    paths = [list(p) + [eos] for p in sorted(raw)]  # appending an end token makes them prefix-free
    n_opt = int(rng.integers(1, len(paths) + 1))
    owners = [int(rng.integers(0, n_opt)) for _ in paths]
    return paths, owners, n_opt


def test_random_tries_sum_to_one_and_aggregate():
    rng = np.random.default_rng(42)
    for _ in range(200):
        paths, owners, n_opt = _random_prefix_free(rng)
        t = LabelTrie.build(paths, owners)
        scale = float(rng.choice([0.1, 3.0, 50.0, 1e4]))
        logits = {u: rng.normal(size=len(k)) * scale for u, k in t.internal_nodes()}
        pp = path_probabilities(t, logits)
        assert np.isfinite(pp).all() and (pp >= 0).all()
        assert pp.sum() == pytest.approx(1.0, abs=1e-12)
        op = option_probabilities(t, logits, n_opt)
        assert op.dtype == np.float64 and op.shape == (n_opt,)
        assert op.sum() == pytest.approx(1.0, abs=1e-15)
        want = np.bincount(owners, weights=pp, minlength=n_opt)
        np.testing.assert_allclose(op, want / want.sum(), rtol=1e-12, atol=1e-300)
        # readouts: one per distinct strict prefix
        assert readout_count(t) == len({tuple(p[:k]) for p in paths for k in range(len(p))})


def test_single_child_nodes_may_be_omitted_but_branching_ones_not():
    t = LabelTrie.build([[1, 2, 99], [1, 3, 99]], owners=[0, 1])  # (), (1,2), (1,3) have one child
    assert readout_count(t) == 4
    full = {(): [0.3], (1,): [0.0, np.log(4.0)], (1, 2): [5.0], (1, 3): [-2.0]}
    short = {(1,): [0.0, np.log(4.0)]}
    np.testing.assert_allclose(option_probabilities(t, full, 2), [0.2, 0.8], rtol=1e-14)
    np.testing.assert_allclose(option_probabilities(t, short, 2), [0.2, 0.8], rtol=1e-14)
    with pytest.raises(ValueError, match=r"no logits for trie node \(\)"):
        path_probabilities(LabelTrie.build([[1], [2]], [0, 1]), {})


def test_minus_inf_in_a_node_gives_zero_not_nan():
    t = LabelTrie.build([[1, 5], [1, 6], [2]], owners=[0, 1, 2])
    p = option_probabilities(t, {(): [0.0, 0.0], (1,): [-np.inf, 0.0]}, 3)
    np.testing.assert_allclose(p, [0.0, 0.5, 0.5])
    lp = path_log_probabilities(t, {(): [0.0, 0.0], (1,): [-np.inf, 0.0]})
    assert lp[0] == -np.inf


def test_shape_and_owner_errors():
    t = LabelTrie.build([[1], [2]], owners=[0, 1])
    with pytest.raises(ValueError, match=r"expected \(2,\)"):
        path_probabilities(t, {(): [0.0, 1.0, 2.0]})
    with pytest.raises(ValueError, match="n_options=1"):
        option_probabilities(t, {(): [0.0, 1.0]}, 1)


# --- verbalizer mixture and label mass (issue #14) ------------------------------------------------


def test_mixture_sums_every_verbalizer_of_an_option():
    """Letter and name readouts of one option add up: P(o) ∝ Σ_v P(v), by hand on a made-up trie.

    Option 0: letter [10], name [20, 21], " name" [22]; option 1: letter [11], name [20, 23]
    (two names sharing a first token)."""
    paths = [[10], [11], [20, 21], [20, 23], [22]]
    owners = [0, 1, 0, 1, 0]
    trie = LabelTrie.build(paths, owners)
    root = np.array([1.0, 0.5, 2.0, -1.0])  # children (10, 11, 20, 22)
    node20 = np.array([0.3, -0.2])           # children (21, 23)
    e = np.exp(root) / np.exp(root).sum()
    f = np.exp(node20) / np.exp(node20).sum()
    want = np.array([e[0] + e[2] * f[0] + e[3], e[1] + e[2] * f[1]])
    got = option_probabilities(trie, {(): root, (20,): node20}, n_options=2)
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-12)
    assert abs(want.sum() - 1) < 1e-12  # prefix-free: the verbalizers' probabilities sum to 1


def test_label_mass_equals_the_full_softmax_share():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 4, size=5000)  # a full "vocabulary"
    allowed = [3, 17, 4999]
    full = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    lse = streaming_logsumexp(np.array_split(z, 7))
    assert lse == pytest.approx(z.max() + np.log(np.exp(z - z.max()).sum()), abs=1e-12)
    assert label_mass(z[allowed], lse) == pytest.approx(full[allowed].sum(), rel=1e-12)
    assert label_mass(z, lse) == pytest.approx(1.0, abs=1e-12)  # every token allowed


def test_streaming_logsumexp_is_stable_and_order_free():
    z = np.array([1e300, -1e300, 0.0, 1e300])
    for chunks in ([z], [z[:1], z[1:]], [z[2:], z[:2]]):
        assert streaming_logsumexp(chunks) == pytest.approx(1e300 + np.log(2.0))
    assert streaming_logsumexp([[-np.inf, 0.0]]) == 0.0
    with pytest.raises(ValueError):
        streaming_logsumexp([])
    with pytest.raises(ValueError):
        streaming_logsumexp([[np.nan]])
    with pytest.raises(ValueError):
        label_mass([0.0], float("inf"))

