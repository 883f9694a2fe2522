"""Tree blocks: several nodes of a call's radix tree computed as ONE row of tokens (tree attention).

The engine's radix tree (radix_tree.py) has, under a request's state, one node per question suffix and
below each suffix the branches of its label trie. Run as ordinary rows, every node is a row that
carries its own copy of its parent's KV. A *block* instead lays the pending subtree of one ready
node out as a single row of Q tokens, in depth-first order, over ONE copy of that node's past
(SpecInfer-style tree attention):

    row:        s1 s1 | a | b | s2 | c          (suffix s1 with labels a, b; suffix s2 with label c)
    parent:     -1  0 | 1 | 1 | -1 | 3          (-1: the token's predecessor is the past)
    depth:       0  1 | 2 | 2 |  0 | 1          (position_ids = P + depth)

Token i attends to every real column of the past and, inside the block, to itself and its
ancestors only (the chain of ``parent``), so each token computes exactly what it would compute at
the end of its own prefix: the additive part of a masked column is an exact zero. Because the
order is depth-first, every node's tokens are contiguous: its hidden state is the row's hidden at
its last token and its own KV segment is its columns of ``present``.

The graph takes this as a 4-D boolean ``attention_mask`` (batch, 1, seq, past_seq + seq), True =
attend (docs/FORMAT.md, format version 2); an ordinary row is the special case of a chain, and
:func:`causal_mask` builds the same mask from a 2-D padding mask. This module is numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Block:
    """One row: tokens (Q,), each token's in-row parent (Q,) (-1 = the past), and where each node's
    tokens start (the nodes in the order they were laid out)."""

    tokens: np.ndarray   # (Q,) int64
    parent: np.ndarray   # (Q,) int64, parent[i] < i
    offsets: list[int]   # node k's tokens are [offsets[k], offsets[k] + len(node k))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def chain(tokens: Sequence[int]) -> Block:
    """An ordinary row: every token's parent is the previous token.

    >>> chain([7, 8, 9]).parent.tolist()
    [-1, 0, 1]
    """
    n = len(tokens)
    return Block(np.asarray(tokens, np.int64), np.arange(-1, n - 1, dtype=np.int64), [0])


def lay_out(edges: Sequence[Sequence[int]], parents: Sequence[int]) -> Block:
    """A block from nodes given in depth-first preorder: ``edges[k]`` are node k's tokens and
    ``parents[k]`` the index of its parent node in the block (-1: the block's past).

    >>> b = lay_out([(5, 6), (7,), (8,), (9,), (4,)], [-1, 0, 0, -1, 3])
    >>> b.tokens.tolist(), b.parent.tolist(), b.offsets
    ([5, 6, 7, 8, 9, 4], [-1, 0, 1, 1, -1, 4], [0, 2, 3, 4, 5])
    """
    tokens: list[int] = []
    parent: list[int] = []
    offsets: list[int] = []
    for k, (edge, p) in enumerate(zip(edges, parents)):
        assert p < k, "nodes must come in depth-first preorder (parents first)"
        offsets.append(len(tokens))
        before = offsets[p] + len(edges[p]) - 1 if p >= 0 else -1  # the parent's last token
        for t in edge:
            parent.append(before)
            before = len(tokens)
            tokens.append(int(t))
    return Block(np.asarray(tokens, np.int64), np.asarray(parent, np.int64), offsets)


def depths(parent: np.ndarray) -> np.ndarray:
    """Number of in-row ancestors of each token: position_ids = past length + depth.

    >>> depths(np.array([-1, 0, 1, 1, -1, 4])).tolist()
    [0, 1, 2, 2, 0, 1]
    """
    d = np.zeros(len(parent), np.int64)
    for i, p in enumerate(parent):
        d[i] = d[p] + 1 if p >= 0 else 0
    return d


def visibility(parent: np.ndarray) -> np.ndarray:
    """(Q, Q) bool: token i sees token j iff j is i or one of its ancestors (parent chain).

    >>> visibility(np.array([-1, 0, 0])).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    """
    q = len(parent)
    vis = np.zeros((q, q), bool)
    for i, p in enumerate(parent):  # parents come first: copy the parent's row, add oneself
        if p >= 0:
            vis[i, :i] = vis[p, :i]
        vis[i, i] = True
    return vis


def tree_mask(past_mask: np.ndarray, blocks: Sequence[Block], seq: int) -> np.ndarray:
    """The 4-D mask of one batch: row b = ``blocks[b]`` right-padded to ``seq`` tokens after a
    past whose real columns are ``past_mask[b]`` (B, T). Returns (B, 1, seq, T + seq) bool.

    A padding token sees the past and itself only (its outputs are never read; no query row is
    ever fully masked, so softmax stays finite).

    >>> m = tree_mask(np.array([[1, 0]]), [lay_out([(5,), (6,), (7,)], [-1, 0, 0])], 4)
    >>> m[0, 0].astype(int).tolist()
    [[1, 0, 1, 0, 0, 0], [1, 0, 1, 1, 0, 0], [1, 0, 1, 0, 1, 0], [1, 0, 0, 0, 0, 1]]
    """
    b, t = past_mask.shape
    mask = np.zeros((b, 1, seq, t + seq), bool)
    mask[:, 0, :, :t] = past_mask[:, None, :].astype(bool)          # (B, S, T): every query sees the past
    idx = np.arange(seq)
    mask[:, 0, idx, t + idx] = True                                   # every query sees itself
    for row, block in enumerate(blocks):
        q = len(block)
        mask[row, 0, :q, t : t + q] = visibility(block.parent)       # (Q, Q) tree part
    return mask


def causal_mask(mask: np.ndarray, seq: int) -> np.ndarray:
    """The 4-D form of a 2-D padding mask (B, P + seq) for ``seq`` new tokens: query i sees
    column j iff ``mask[j]`` and j <= P + i — what transformers builds inside a 2-D-mask graph.
    Returns (B, 1, seq, P + seq) bool.

    >>> causal_mask(np.array([[1, 0, 1, 1]]), 2)[0, 0].astype(int).tolist()
    [[1, 0, 1, 0], [1, 0, 1, 1]]
    """
    total = mask.shape[1]
    past = total - seq
    cols = np.arange(total)[None, :]                                  # (1, P + S)
    rows = past + np.arange(seq)[:, None]                             # (S, 1)
    return (mask.astype(bool)[:, None, :] & (cols <= rows)[None])[:, None]  # (B, 1, S, P + S)


def mask_bytes(rows: int, seq: int, total: int, heads: int) -> int:
    """Bytes one run holds for attention beyond the KV: the bool mask (B, 1, S, T) and the float32
    scores of one layer (B, heads, S, T) that attention materializes from it."""
    return rows * seq * total * (1 + 4 * heads)


__all__ = ["Block", "causal_mask", "chain", "depths", "lay_out", "mask_bytes", "tree_mask", "visibility"]
