"""engine/schedule.py's packing on hand-built radix trees (no model): a ready node's pending
subtree is one block while it fits the budget; a subtree that does not fit runs its top node alone
(a node longer than the chunk is prefilled in chunks) and its children are packed next; a shared
node's block stops where requests part."""

from __future__ import annotations

from typed_decisions.engine.radix_tree import Node
from typed_decisions.engine.schedule import Budget, pack, subtree


def budget(chunk: int) -> Budget:
    return Budget(kv_bytes_per_token=1, num_heads=1, takes_tree_mask=True, prefill_chunk=chunk,
                  max_batch_tokens=8192, max_batch_kv_bytes=1 << 40, solo_tokens=256, equal_pasts=False)


def child(parent: Node, n: int, owner: int | None, first: int) -> Node:
    node = Node(tuple(range(first, first + n)), parent, owner=owner)
    parent.children[(owner, first)] = node
    return node


def one_request() -> list[Node]:
    """head (53, shared) → state (24) → listing (1,598) → four one-token labels: the tiny model's
    200-letter-option request (tests/test_engine_packed.py)."""
    head = child(Node((), None), 53, None, 0)
    state = child(head, 24, 0, 100)
    listing = child(state, 1598, 0, 200)
    return [head, state, listing, *(child(listing, 1, 0, 5000 + k) for k in range(4))]


def test_a_subtree_that_fits_is_one_block():
    nodes = one_request()
    assert pack([nodes[0]], set(nodes), budget(2048)) == [nodes]


def test_a_subtree_too_long_runs_its_top_node_then_packs_below():
    nodes = one_request()
    head, state, listing, *labels = nodes
    pending = set(nodes)
    assert pack([head], pending, budget(512)) == [[head]]
    pending.discard(head)
    assert pack([state], pending, budget(512)) == [[state]]
    pending.discard(state)
    assert pack([listing], pending, budget(512)) == [[listing]]   # alone, in chunks (engine.py)
    pending.discard(listing)
    assert pack(labels, pending, budget(512)) == [labels]          # the labels in one block


def test_a_shared_block_stops_where_requests_part():
    head = child(Node((), None), 53, None, 0)
    states = [child(head, 40, owner, 100 + 1000 * owner) for owner in (0, 1)]
    labels = [child(s, 1, s.owner, 9000) for s in states]
    pending = {head, *states, *labels}
    assert subtree(head, pending) == [head]
    assert pack([head], pending, budget(512)) == [[head]]
    pending.discard(head)
    assert pack(states, pending, budget(512)) == [[states[0], labels[0]], [states[1], labels[1]]]  # a block per request
