"""The engine's array pieces without a model: ``KVRows``, ``stack_paths`` and ``build_radix_tree``,
against values written out by hand (the oracle tests run the whole engine on the tiny model)."""

from __future__ import annotations

import numpy as np
import pytest

from typed_decisions.engine import KVRows, build_radix_tree, stack_paths


def kv(length: int, start: float, layers: int = 2) -> KVRows:
    """One unpadded row: layer i's key at position t is start + 10 i + t (every head and dim);
    the value is its negative."""
    keys = [np.broadcast_to((start + 10 * i + np.arange(length, dtype=np.float32))[None, None, :, None],
                            (1, 2, length, 3)).copy() for i in range(layers)]  # (1, kv_heads, T, head_dim)
    return KVRows(keys, [-k for k in keys], np.ones((1, length), np.int64), np.array([length], np.int64))


def test_kvrows_length_nbytes_slice():
    a = kv(3, 0.0)
    assert a.length == 3
    assert a.nbytes == 2 * 2 * (1 * 2 * 3 * 3 * 4) + 3 * 8  # K and V of 2 layers (float32) + the int64 mask
    p = a.slice(0, 1, 3)  # positions 1..2 of row 0: a node's own segment
    assert p.length == 2 and p.next_pos.tolist() == [3] and p.mask.tolist() == [[1, 1]]
    assert p.keys[1][0, 0, :, 0].tolist() == [11.0, 12.0] and p.values[0][0, 1, :, 2].tolist() == [-1.0, -2.0]
    p.keys[0][0, 0, 0, 0] = 99.0  # a segment is a copy: it keeps no batch array alive
    assert a.keys[0][0, 0, 1, 0] == 1.0


def test_stack_paths_concatenates_segments_and_right_pads_with_masked_zeros():
    a, b, c = kv(2, 100.0), kv(1, 300.0), kv(3, 200.0)
    s = stack_paths([[a, b], [c], []], np.dtype(np.float32))
    assert s.length == 3 and s.keys[0].shape == (3, 2, 3, 3) and s.keys[0].dtype == np.float32
    assert s.mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 0]]
    assert s.next_pos.tolist() == [3, 3, 0]
    assert s.keys[0][:, 0, :, 0].tolist() == [[100.0, 101.0, 300.0], [200.0, 201.0, 202.0], [0.0, 0.0, 0.0]]
    assert s.values[1][:, 1, :, 2].tolist() == [[-110.0, -111.0, -310.0], [-210.0, -211.0, -212.0], [0.0, 0.0, 0.0]]
    short = stack_paths([[a], [c]], np.dtype(np.float16))
    assert short.mask.tolist() == [[1, 1, 0], [1, 1, 1]] and short.keys[0].dtype == np.float16


def _shape(node) -> tuple:
    """(edge tokens, query indices, children's shapes in first-token order), recursively."""
    order = sorted(node.children.values(), key=lambda c: (c.tokens, -1 if c.owner is None else c.owner))
    return (node.tokens, sorted(node.queries), [_shape(c) for c in order])


def _check_parents(node) -> None:
    for child in node.children.values():
        key = (None, child.tokens) if child.owner is None else (child.owner, child.tokens[0])  # shared: whole segment
        assert child.parent is node and node.children[key] is child
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
    if expected[0]:  # the root is always empty; a shared prefix is its one child
        expected = ((), [], [expected])
    assert _shape(root) == expected
    assert root.parent is None
    _check_parents(root)
    assert _ends(root, {}) == dict(enumerate(map(tuple, contexts)))  # every context is its root path


def test_owners_share_nodes_up_to_their_cache_point_and_keep_the_rest():
    """Two requests (owners 0 and 1) with the same state (1, 2) and the same question (3, 4): the
    state is one shared node, each request gets its own copy of the question; a third context of
    owner 0 shares owner 0's edge. Without owners, identical contexts share everything."""
    contexts = [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 5)]
    root = build_radix_tree(contexts, checkpoints=[(2,)] * 3, owners=[0, 1, 0], shared_cuts=[(2,)] * 3)
    (state,) = root.children.values()
    assert state.tokens == (1, 2) and state.owner is None and state.checkpoint
    mine, theirs = sorted(state.children.values(), key=lambda c: c.owner)
    assert (mine.owner, mine.tokens, theirs.owner, theirs.tokens) == (0, (3,), 1, (3, 4))
    assert sorted((c.tokens, c.queries) for c in mine.children.values()) == [((4,), [0]), ((5,), [2])]
    assert theirs.queries == [1] and not theirs.children
    _check_parents(root)
    assert _ends(root, {}) == dict(enumerate(contexts))
    shared = build_radix_tree(contexts, checkpoints=[(2,)] * 3)
    assert _shape(shared) == ((), [], [((1, 2), [], [((3,), [], [((4,), [0, 1], []), ((5,), [2], [])])])])


def test_checkpoints_split_edges_and_mark_nodes():
    """A checkpoint inside an edge splits it there; one at an existing boundary only marks it."""
    root = build_radix_tree([(1, 2, 3, 4), (1, 2, 3, 5)], checkpoints=[(2, 3), (2,)])
    assert _shape(root) == ((), [], [((1, 2), [], [((3,), [], [((4,), [0], []), ((5,), [1], [])])])])
    (head,) = root.children.values()
    (state,) = head.children.values()
    assert head.checkpoint and state.checkpoint and not any(c.checkpoint for c in state.children.values())
    assert state.start == 2 and state.prefix() == (1, 2, 3)
    _check_parents(root)


def test_owners_share_only_whole_segments_between_their_cuts():
    """Owners 0 and 1 share the head (1, 2) and nothing of states (3, 4) and (3, 5) that merely
    begin alike; owner 2's state (3, 4) is owner 0's whole segment, so it is shared. Without owners
    the two states would share their first token (3,)."""
    contexts = [(1, 2, 3, 4, 7), (1, 2, 3, 5, 7), (1, 2, 3, 4, 8)]
    cuts = [(2, 4)] * 3
    root = build_radix_tree(contexts, checkpoints=cuts, owners=[0, 1, 2], shared_cuts=cuts)
    (head,) = root.children.values()
    assert head.tokens == (1, 2) and head.owner is None and head.checkpoint
    states = sorted(head.children.values(), key=lambda c: c.tokens)
    assert [(s.tokens, s.owner, s.checkpoint) for s in states] == [((3, 4), None, True), ((3, 5), None, True)]
    assert sorted((c.owner, c.tokens) for c in states[0].children.values()) == [(0, (7,)), (2, (8,))]
    _check_parents(root)
    assert _ends(root, {}) == dict(enumerate(contexts))
    plain = build_radix_tree(contexts, checkpoints=cuts)
    assert [c.tokens for c in next(iter(plain.children.values())).children.values()] == [(3,)]


def test_a_checkpoint_inside_a_shared_segment_is_refused():
    with pytest.raises(ValueError, match="checkpoint 3 of context 0 falls inside a shared segment"):
        build_radix_tree([(1, 2, 3, 4)], checkpoints=[(3,)], owners=[0], shared_cuts=[(2, 4)])
