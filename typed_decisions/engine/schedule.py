"""Scheduling a call: which nodes of the radix tree to compute, how to lay them out as rows (tree
blocks or single edges) and how to group rows into ONNX Runtime runs within the budgets.

Pure functions of the tree and a ``Budget``; the engine (engine.py) runs what they plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from .radix_tree import Node
from .tree_block import Block, lay_out, mask_bytes


@dataclass(frozen=True)
class Budget:
    """The limits one run must respect (a snapshot of the engine's settings for one call)."""

    kv_bytes_per_token: int  # K and V of one token across all layers
    num_heads: int           # attention heads (the 4-D mask's scores are per head)
    takes_tree_mask: bool    # the graph's attention_mask is 4-D (format version 2)
    prefill_chunk: int
    max_batch_tokens: int
    max_batch_kv_bytes: int
    solo_tokens: int         # an item this long runs alone: stacking it gains nothing
    equal_pasts: bool        # rows of a run must have pasts of one length (INT8)

    def fits(self, past: int, q: int) -> bool:
        """One row of q tokens after ``past`` within the budgets: q <= the prefill chunk and the
        batch token cap; past + present and the (q, past + q) mask and scores <= max_batch_kv_bytes."""
        held = 2 * (past + q) * self.kv_bytes_per_token + mask_bytes(1, q, past + q, self.num_heads)
        return q <= min(self.prefill_chunk, self.max_batch_tokens) and held <= self.max_batch_kv_bytes


def plan(root: Node) -> list[Node]:
    """Nodes to compute, parents first: those not restored from the cache that have a query
    or a descendant to compute (a restored node's ancestors are not needed for it)."""
    wanted: list[Node] = []

    def mark(node: Node) -> bool:
        below = [mark(c) for c in node.children.values()]  # visit every child
        need = bool(node.tokens) and not node.kv_from_start and (bool(node.queries) or any(below))
        if need:
            wanted.append(node)
        return need

    mark(root)
    return wanted[::-1]  # post-order reversed: every parent before its children


def subtree(node: Node, pending: set[Node]) -> list[Node]:
    """``node`` and its pending descendants in depth-first preorder (a tree block's layout),
    stopping below a node where requests part: its pending children are not all one owner's
    (several shared children can only come from different requests)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        below = [c for c in n.children.values() if c in pending]
        owners = {c.owner for c in below}
        if len(below) > 1 and (len(owners) > 1 or None in owners):
            continue
        stack.extend(reversed(below))
    return out


def block(item: list[Node]) -> Block:
    """The row of an item: nodes in depth-first preorder whose top nodes share one parent (the past)."""
    index = {id(n): k for k, n in enumerate(item)}
    assert all(id(n.parent) in index or n.parent is item[0].parent for n in item)
    return lay_out([n.tokens for n in item], [index.get(id(n.parent), -1) for n in item])


def pack(nodes: list[Node], pending: set[Node], budget: Budget) -> list[list[Node]]:
    """Tree blocks for ``nodes`` (children of ready nodes).

    Below a ready parent, one owner's children (``build_radix_tree``) are packed as their
    pending subtrees in depth-first order, whole subtrees per block, a new block when one would
    not ``fit``. A child whose subtree alone does not fit runs as a block of itself (its own
    children are packed in the next round, over its KV).

    A shared child (owner None: a prefix several requests may share) is a block of its own
    that stops where requests part (``subtree``): siblings from other requests never sit in
    its row. So every token of a request sits at the same
    column of its row whoever shares the call — a chain cut into consecutive blocks keeps its
    columns — and attention's float sums, which depend on where a token's visible columns lie,
    come out the same: INT8's per-token rounding then has nothing to tip.

    Suffixes and labels go in one block rather than one packed level each: every run streams
    all weights and copies the past once more (docs/benchmarks.md, "Tree blocks").
    """
    by_parent: dict[tuple[int, int | None], list[Node]] = {}
    for n in nodes:
        by_parent.setdefault((id(n.parent), n.owner), []).append(n)
    items: list[list[Node]] = []
    for (_, owner), children in by_parent.items():
        # Siblings in the parent's own order (the contexts' order), however they were found:
        # a layout must not depend on whether the parent was computed or restored.
        rank = {id(c): k for k, c in enumerate(children[0].parent.children.values())}
        children.sort(key=lambda c: rank[id(c)])
        past = children[0].start
        cur: list[Node] = []
        for child in children:
            tree = subtree(child, pending)
            if not budget.fits(past, sum(len(n.tokens) for n in tree)):
                items.append([child])
            elif owner is None:
                items.append(tree)
            elif budget.fits(past, sum(len(n.tokens) for n in cur + tree)):
                cur += tree
            else:
                items.append(cur)
                cur = tree
        if cur:
            items.append(cur)
    return items


def token_groups(items: list[list[Node]], budget: Budget) -> list[list[list[Node]]]:
    """Split a batch of items (rows: one node, or a tree block) so that rows × longest row
    stays under ``max_batch_tokens`` and the stacked past + present of the rows (and, for a
    4-D-mask graph, the mask and one layer's scores) stay under ``max_batch_kv_bytes`` — and,
    with ``equal_pasts``, so that the rows of a run have pasts of one length. An item of at
    least ``solo_tokens`` tokens runs alone: batching it would only add padding.

    The byte bound matters for many label branches after a long prompt: 40 rows over a
    1,221-token past of the 1.5B model would stack 2.8 GB of past and get as much present back.
    """
    per_token = budget.kv_bytes_per_token
    heads = budget.num_heads if budget.takes_tree_mask else 0
    groups: list[list[list[Node]]] = []
    cur: list[list[Node]] = []
    longest = past = 0
    starts = {id(it[0]): it[0].start for it in items}
    sizes = {id(it[0]): sum(len(n.tokens) for n in it) for it in items}

    def key(it: list[Node]) -> tuple[int, int] | int:
        return (starts[id(it[0])], sizes[id(it[0])]) if budget.equal_pasts else sizes[id(it[0])]

    for it in sorted(items, key=key):
        start, size = starts[id(it[0])], sizes[id(it[0])]
        if size >= budget.solo_tokens:
            groups.append([it])
            continue
        longest_new, past_new = max(longest, size), max(past, start)
        rows = len(cur) + 1
        too_many_tokens = longest_new * rows > budget.max_batch_tokens
        held = 2 * rows * (past_new + longest_new) * per_token
        if heads:
            held += mask_bytes(rows, longest_new, past_new + longest_new, heads)
        too_many_bytes = held > budget.max_batch_kv_bytes
        other_past = budget.equal_pasts and cur and start != starts[id(cur[0][0])]
        if cur and (too_many_tokens or too_many_bytes or other_past):
            groups.append(cur)
            cur, longest_new, past_new = [], size, start
        cur.append(it)
        longest, past = longest_new, past_new
    if cur:
        groups.append(cur)
    return groups


__all__ = ["Budget", "block", "pack", "plan", "subtree", "token_groups"]
