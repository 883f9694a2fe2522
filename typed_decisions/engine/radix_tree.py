"""The radix tree of a call: its contexts as a compressed token trie, so each shared run of tokens
(a system prompt, a request's state) is one node computed once, on top of its parent's KV.

Nodes carry what the engine fills in (their edge's KV segment, their last hidden state); this
module only builds and walks trees. Who may share a node with whom (``owners``, ``shared_cuts``)
is decided here, so that a request's nodes are the same whatever else shares the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .kv import KVRows


@dataclass(eq=False)
class Node:
    tokens: tuple[int, ...]                 # the edge from the parent
    parent: Node | None
    owner: int | None = None                 # whose contexts this edge serves; None: shared by owners
    # (owner, first token) for an owner's edge, (None, all its tokens) for a shared segment:
    children: dict[tuple[int | None, int | tuple[int, ...]], Node] = field(default_factory=dict)
    queries: list[int] = field(default_factory=list)  # indices of contexts ending here
    checkpoint: bool = False                 # the prefix ending here is worth caching across calls
    # Filled in by the engine:
    kv: KVRows | None = None                 # KV of this edge's tokens only (or, cached, from position 0)
    kv_from_start: bool = False              # kv covers the whole prefix (restored from the cache)
    hidden: np.ndarray | None = None         # last-position hidden state, once computed
    layers: np.ndarray | None = None         # (L, H) mid-layer states at that position (Backbone.hidden_layers)

    @property
    def start(self) -> int:
        """Position of this edge's first token."""
        n, node = 0, self.parent
        while node is not None:
            n += len(node.tokens)
            node = node.parent
        return n

    def prefix(self) -> tuple[int, ...]:
        """Every token from the root to the end of this edge."""
        parts, node = [], self
        while node is not None:
            parts.append(node.tokens)
            node = node.parent
        return tuple(t for part in reversed(parts) for t in part)

    def path_kv(self) -> list[KVRows]:
        """Segments whose concatenation is the KV of this node's whole prefix (oldest first)."""
        segs, node = [], self
        while node is not None and node.tokens:
            assert node.kv is not None, "a node's ancestors must be computed or cached first"
            segs.append(node.kv)
            if node.kv_from_start:
                break
            node = node.parent
        return segs[::-1]


def _split(node: Node, n: int) -> Node:
    """Split ``node``'s edge after n tokens; returns the new upper node (the old one keeps the tail)."""
    upper = Node(node.tokens[:n], node.parent, owner=node.owner)
    if node.parent is not None:
        node.parent.children[(node.owner, node.tokens[0])] = upper
    node.tokens = node.tokens[n:]
    node.parent = upper
    upper.children[(node.owner, node.tokens[0])] = node
    return upper


def _insert(node: Node, ctx: tuple[int, ...], owner: int | None) -> Node:
    """Walk ``ctx`` down from ``node`` through edges of ``owner``, adding or splitting edges;
    returns the node whose edge ends exactly at the end of ``ctx``."""
    while ctx:
        child = node.children.get((owner, ctx[0]))
        if child is None:
            child = node.children[(owner, ctx[0])] = Node(ctx, node, owner=owner)
            return child
        n, limit = 0, min(len(child.tokens), len(ctx))
        while n < limit and child.tokens[n] == ctx[n]:
            n += 1
        if n < len(child.tokens):
            child = _split(child, n)
        node, ctx = child, ctx[n:]
    return node


def _share(node: Node, segment: tuple[int, ...]) -> Node:
    """The shared child of ``node`` whose edge is exactly ``segment`` (added if missing). Shared
    segments are keyed by all their tokens and never split: two segments that merely begin alike
    are two nodes."""
    key = (None, segment)
    child = node.children.get(key)
    if child is None:
        child = node.children[key] = Node(segment, node, owner=None)
    return child


def _cuts(points: Sequence[int], length: int) -> list[int]:
    return sorted({int(p) for p in points if 0 < p <= length})


def build_radix_tree(contexts: Sequence[Sequence[int]],
                     checkpoints: Sequence[Sequence[int]] = (),
                     owners: Sequence[int] | None = None,
                     shared_cuts: Sequence[Sequence[int]] = ()) -> Node:
    """Compressed trie of the contexts under an empty root: contexts sharing a prefix share the
    nodes of that prefix (a request's state is one node, its questions' suffixes its children).

    ``checkpoints[i]`` are prefix lengths of context i worth caching: each becomes a node
    boundary (an edge is split there) marked ``checkpoint``.

    ``owners[i]`` says whose context i is (the Decider: its request) and ``shared_cuts[i]`` where
    it may be shared with other owners' contexts (the request's cache points: the end of the chat
    head, of the state). Up to its last cut a context is a chain of whole segments, each shared
    only with a context that has the very same segment after the very same segments; after it,
    tokens are shared only with contexts of the same owner. So a request's nodes are the same
    whatever else shares the call — a state is never cut where it happens to begin like another
    request's state — and tree blocks (``Engine._pack``) lay them out as if it came alone. Every
    checkpoint of an owned context must be one of its cuts. Without owners every context belongs
    to one owner (0) and shares any common prefix, token by token.

    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6)])
    >>> (shared,) = root.children.values()
    >>> shared.tokens, sorted(c.tokens for c in shared.children.values())
    ((1, 2), [(3,), (4,)])
    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4)], checkpoints=[(1,), (1,)])
    >>> (head,) = root.children.values()
    >>> head.tokens, head.checkpoint, [c.tokens for c in head.children.values()]
    ((1,), True, [(2,)])
    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 3)], owners=[0, 1], shared_cuts=[(2,), (2,)])
    >>> (state,) = root.children.values()
    >>> state.tokens, state.owner, sorted((c.owner, c.tokens) for c in state.children.values())
    ((1, 2), None, [(0, (3,)), (1, (3,))])
    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4, 3)], owners=[0, 1], shared_cuts=[(2,), (3,)])
    >>> sorted(c.tokens for c in root.children.values())   # states (1, 2) and (1, 2, 4): two nodes
    [(1, 2), (1, 2, 4)]
    """
    root = Node((), None)
    owner_of = [0] * len(contexts) if owners is None else owners
    segments: list[dict[int, Node]] = []  # per context: its shared nodes by where they end
    for q, ctx in enumerate(map(tuple, contexts)):
        node, at, mine = root, 0, {0: root}
        if owners is not None:
            for cut in _cuts(shared_cuts[q], len(ctx)):
                node, at = _share(node, ctx[at:cut]), cut
                mine[cut] = node
        segments.append(mine)
        _insert(node, ctx[at:], owner_of[q]).queries.append(q)
    for q, (ctx, points) in enumerate(zip(map(tuple, contexts), checkpoints)):
        mine, split = segments[q], max(segments[q])
        for p in _cuts(points, len(ctx)):
            if p > split:
                _mark(mine[split], ctx, split, p, owner_of[q])
            elif p in mine:
                mine[p].checkpoint = True
            else:
                raise ValueError(f"checkpoint {p} of context {q} falls inside a shared segment: "
                                 f"it must be one of the context's shared_cuts")
    return root


def _mark(node: Node, ctx: tuple[int, ...], end: int, p: int, owner: int) -> None:
    """Make position p of ``ctx`` (of ``owner``, below ``node`` whose edge ends at ``end``) a node
    boundary and mark that node a checkpoint."""
    while end < p:
        node = node.children[(owner, ctx[end])]
        end += len(node.tokens)
    if end > p:  # p falls inside this edge: split it
        node = _split(node, len(node.tokens) - (end - p))
    node.checkpoint = True


# --------------------------------------------------------------------------- backbone


def has_checkpoint(node: Node) -> bool:
    """Whether ``node`` or a node below it is a checkpoint."""
    return node.checkpoint or any(has_checkpoint(c) for c in node.children.values())


__all__ = ["Node", "build_radix_tree", "has_checkpoint"]
