"""Tree blocks (typed_decisions/engine/tree_block.py) against brute force, without a model.

The oracle is a toy causal attention stack in numpy (float64): every node's output computed from
its own full prefix, one prefix at a time, is compared with ONE packed forward of the whole tree
over a shared past, with the 4-D mask and position = past + depth.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from typed_decisions.engine.tree_block import (
    causal_mask,
    chain,
    depths,
    lay_out,
    tree_mask,
    visibility,
)

VOCAB, DIM, LAYERS = 50, 8, 2


def toy_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"emb": rng.normal(size=(VOCAB, DIM)), "pos": rng.normal(size=(64, DIM)),
            **{f"{n}{i}": rng.normal(size=(DIM, DIM)) / np.sqrt(DIM) for i in range(LAYERS) for n in "qkvo"}}


def toy_forward(w, ids: np.ndarray, pos: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Toy stack: x = emb[ids] + pos_emb[pos]; per layer x += softmax(q k^T + bias) v o, where
    mask (S, S) bool says who sees whom. Returns (S, DIM)."""
    x = w["emb"][ids] + w["pos"][pos]                                    # (S, D)
    bias = np.where(mask, 0.0, -np.inf)                                  # (S, S)
    for i in range(LAYERS):
        q, k, v = x @ w[f"q{i}"], x @ w[f"k{i}"], x @ w[f"v{i}"]
        z = q @ k.T + bias
        a = np.exp(z - z.max(axis=1, keepdims=True))
        x = x + (a / a.sum(axis=1, keepdims=True)) @ v @ w[f"o{i}"]
    return x


def random_tree(rng: random.Random, nodes: int) -> tuple[list[tuple[int, ...]], list[int]]:
    """Nodes in depth-first preorder: (edges, parent index or -1)."""
    edges, parents, stack = [], [], []  # stack: the current root-to-node path
    for k in range(nodes):
        depth = rng.randint(0, len(stack))
        del stack[depth:]
        parents.append(stack[-1] if stack else -1)
        edges.append(tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, 3))))
        stack.append(k)
    return edges, parents


def prefix_of(edges, parents, k) -> list[int]:
    out = []
    while k >= 0:
        out = list(edges[k]) + out
        k = parents[k]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_one_packed_forward_equals_every_prefix_alone(seed):
    rng = random.Random(seed)
    w = toy_weights(seed)
    past = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 6))]
    edges, parents = random_tree(rng, rng.randint(1, 9))
    block = lay_out(edges, parents)
    p, q = len(past), len(block)
    # Packed: past + block in one sequence; the past is causal, the block sees the past and its tree.
    full = np.zeros((p + q, p + q), bool)
    full[:p, :p] = np.tril(np.ones((p, p), bool))
    full[p:] = tree_mask(np.ones((1, p), np.int64), [block], q)[0, 0]
    ids = np.concatenate([past, block.tokens])
    pos = np.concatenate([np.arange(p), p + depths(block.parent)])
    packed = toy_forward(w, ids, pos, full)
    for k, edge in enumerate(edges):
        alone = prefix_of(edges, parents, k)
        seq = np.array(past + alone)
        ref = toy_forward(w, seq, np.arange(len(seq)), np.tril(np.ones((len(seq),) * 2, bool)))[-1]
        got = packed[p + block.offsets[k] + len(edge) - 1]               # the node's last token
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_visibility_is_the_ancestor_relation():
    rng = random.Random(7)
    for _ in range(20):
        edges, parents = random_tree(rng, rng.randint(1, 12))
        block = lay_out(edges, parents)
        vis = visibility(block.parent)
        for i in range(len(block)):
            ancestors, j = set(), i
            while j >= 0:
                ancestors.add(j)
                j = int(block.parent[j])
            assert set(np.flatnonzero(vis[i])) == ancestors
        assert depths(block.parent).tolist() == [vis[i].sum() - 1 for i in range(len(block))]


def test_nodes_are_contiguous_in_depth_first_order():
    block = lay_out([(1, 2), (3,), (4, 5), (6,)], [-1, 0, 1, -1])
    assert block.offsets == [0, 2, 3, 5]
    assert block.tokens.tolist() == [1, 2, 3, 4, 5, 6]
    assert block.parent.tolist() == [-1, 0, 1, 2, 3, -1]  # node 2's first token follows node 1's last


def test_a_chain_row_has_the_causal_mask_of_its_padding_mask():
    """An ordinary row (right-padded past, right-padded run) builds the same 4-D mask both ways for
    its real tokens; padding queries differ (they only see the past and themselves), unread."""
    past_mask = np.array([[1, 1, 0], [1, 1, 1]], np.int64)               # (B, T)
    runs = [chain([5, 6]), chain([7, 8, 9])]
    new = np.array([[1, 1, 0], [1, 1, 1]], np.int64)                     # (B, S)
    tree = tree_mask(past_mask, runs, 3)
    causal = causal_mask(np.concatenate([past_mask, new], axis=1), 3)
    assert tree.shape == causal.shape == (2, 1, 3, 6)
    np.testing.assert_array_equal(tree[0, 0, :2], causal[0, 0, :2])
    np.testing.assert_array_equal(tree[1], causal[1])


def test_preorder_is_required():
    with pytest.raises(AssertionError):
        lay_out([(1,), (2,)], [1, -1])
