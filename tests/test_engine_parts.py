"""The engine's array pieces without a model: ``KVRows``, ``stack_rows`` and ``build_radix_tree``,
against values written out by hand (the oracle tests run the whole engine on the tiny model)."""

from __future__ import annotations

import numpy as np
import pytest

from typed_decisions.engine import KVRows, build_radix_tree, stack_rows


def kv(length: int, start: float, layers: int = 2) -> KVRows:
    """One unpadded row: layer i's key at position t is start + 10 i + t (every head and dim);
    the value is its negative."""
    keys = [np.broadcast_to((start + 10 * i + np.arange(length, dtype=np.float32))[None, None, :, None],
                            (1, 2, length, 3)).copy() for i in range(layers)]  # (1, kv_heads, T, head_dim)
    return KVRows(keys, [-k for k in keys], np.ones((1, length), np.int64), np.array([length], np.int64))


def test_kvrows_length_nbytes_row_prefix():
    a = kv(3, 0.0)
    assert a.length == 3
    assert a.nbytes == 2 * 2 * (1 * 2 * 3 * 3 * 4) + 3 * 8  # K and V of 2 layers (float32) + the int64 mask
    p = a.prefix(2)
    assert p.length == 2 and p.next_pos.tolist() == [2] and p.mask.tolist() == [[1, 1]]
    assert p.keys[1][0, 0, :, 0].tolist() == [10.0, 11.0] and p.values[0][0, 1, :, 2].tolist() == [-0.0, -1.0]
    p.keys[0][0, 0, 0, 0] = 99.0  # a checkpoint is a copy
    assert a.keys[0][0, 0, 0, 0] == 0.0


def test_stack_rows_right_pads_with_masked_zeros():
    a, b = kv(2, 100.0), kv(3, 200.0)
    s = stack_rows([a, b], np.dtype(np.float32))
    assert s.length == 3 and s.keys[0].shape == (2, 2, 3, 3) and s.keys[0].dtype == np.float32
    assert s.mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert s.next_pos.tolist() == [2, 3]
    assert s.keys[0][:, 0, :, 0].tolist() == [[100.0, 101.0, 0.0], [200.0, 201.0, 202.0]]
    assert s.values[1][:, 1, :, 2].tolist() == [[-110.0, -111.0, 0.0], [-210.0, -211.0, -212.0]]
    one = s.row(0)
    assert one.keys[0].shape == (1, 2, 3, 3) and one.mask.tolist() == [[1, 1, 0]] and one.next_pos.tolist() == [2]


def test_stack_rows_keeps_a_row_mask_with_gaps():
    """A row whose own mask has a masked slot (a padded parent) keeps it: masks are copied, not rebuilt."""
    a = kv(3, 0.0)
    a.mask[0, 1] = 0
    s = stack_rows([a, kv(1, 5.0)], np.dtype(np.float16))
    assert s.mask.tolist() == [[1, 0, 1], [1, 0, 0]] and s.keys[0].dtype == np.float16


def _shape(node) -> tuple:
    """(edge tokens, query indices, children's shapes in first-token order), recursively."""
    return (node.tokens, sorted(node.queries), [_shape(node.children[k]) for k in sorted(node.children)])


def _check_parents(node) -> None:
    for child in node.children.values():
        assert child.parent is node and child.tokens[0] in node.children and node.children[child.tokens[0]] is child
        _check_parents(child)


def _context_of(node) -> tuple[int, ...]:
    return () if node is None else _context_of(node.parent) + node.tokens


def _ends(node, out: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    for q in node.queries:
        out[q] = _context_of(node)
    for child in node.children.values():
        _ends(child, out)
    return out


@pytest.mark.parametrize(("contexts", "expected"), [
    # the docstring's case: one split after the shared prefix
    ([(1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6)],
     ((1, 2), [], [((3,), [0], []), ((4,), [], [((5,), [1], []), ((6,), [2], [])])])),
    # gaps: a context that ends inside another's edge, and a branching node no context ends at
    ([(7, 8, 9, 10), (7, 8), (7, 8, 9, 11)],
     ((7, 8), [1], [((9,), [], [((10,), [0], []), ((11,), [2], [])])])),
    # no common prefix: an empty root with two children
    ([(1, 2), (3,)], ((), [], [((1, 2), [0], []), ((3,), [1], [])])),
    # repeated contexts end at the same node; one context alone is all root
    ([(4, 5), (4, 5), (4, 5, 6)], ((4, 5), [0, 1], [((6,), [2], [])])),
    ([(9, 9, 9)], ((9, 9, 9), [0], [])),
    # a deeper gap: the split at 2 comes after an edge that was inserted whole first
    ([(1, 2, 3, 4), (1, 5), (1, 2, 3, 6), (1, 2)],
     ((1,), [], [((2,), [3], [((3,), [], [((4,), [0], []), ((6,), [2], [])])]), ((5,), [1], [])])),
])
def test_radix_tree_by_hand(contexts, expected):
    root = build_radix_tree(contexts)
    assert _shape(root) == expected
    assert root.parent is None
    _check_parents(root)
    assert _ends(root, {}) == dict(enumerate(map(tuple, contexts)))  # every context is its root path
