"""Readout maths: from the logits of label tokens to option probabilities.

This file holds the part of the method that happens *after* the model ran: a restricted softmax
over the few allowed next tokens, a prefix trie of label token paths, and the chain rule over that
trie. It imports numpy only; it knows nothing of prompts (compiler), tokenizers (labels) or
onnxruntime (engine). Its neighbours: `letters.py` plans which label strings to use, `reducers.py`
turns the option probabilities produced here into typed answers.

Notation. An option o has one or more token paths t = (t_1, ..., t_L) (surface variants such as
"Yes" / "yes" / " yes" each give a path; they all belong to the same owner o). The paths form a
prefix trie; every strict prefix u of a path is an *internal node* with children C(u), the
distinct next tokens seen after u. The engine reads the logits z_u at the last position of
prompt + u, only at the token ids C(u) (sorted ascending). Then

    restricted softmax   q(c | u) = exp(z_u[c] - m) / sum_{c' in C(u)} exp(z_u[c'] - m),  m = max z_u
    chain rule           P(t) = prod_{k=1..L} q(t_k | t_<k)       (computed as a sum of log q)
    option probability   P(o) = sum_{t owned by o} P(t),  then P(o) /= sum_o' P(o')

Because no path is a strict prefix of another (the caller appends an end-of-answer token when one
would be), the leaves are exactly the paths, and sum_t P(t) = 1 up to rounding; the final
renormalization only removes float drift.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "restricted_softmax",
    "log_restricted_softmax",
    "LabelTrie",
    "path_log_probabilities",
    "path_probabilities",
    "option_probabilities",
    "readout_count",
    "as_probabilities",
    "label_mass",
    "streaming_logsumexp",
]

Prefix = tuple[int, ...]
PROB_TOL = 1e-6  # how far from 1 a probability vector may sum before we call it a bug


def as_probabilities(probs: ArrayLike, *, normalized: bool = True) -> np.ndarray:
    """A validated float64 probability vector: 1-D, non-empty, finite, >= 0, and summing to 1
    within 1e-6 (``normalized``) or at least not all 0 (``normalized=False``: weights that the
    caller renormalizes). The one validator of probability vectors (reducers, calibration, metrics,
    permutation harness).

    >>> as_probabilities([0.25, 0.75]).tolist(), as_probabilities([2, 6], normalized=False).tolist()
    ([0.25, 0.75], [2.0, 6.0])
    >>> as_probabilities([0.5, 0.6])
    Traceback (most recent call last):
    ValueError: probabilities must sum to 1, got sum 1.1
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"probabilities must be a non-empty 1-D array, got shape {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any():
        raise ValueError(f"probabilities must be finite and >= 0, got {p.tolist()}")
    if normalized and abs(p.sum() - 1.0) > PROB_TOL:
        raise ValueError(f"probabilities must sum to 1, got sum {float(p.sum())!r}")
    if not normalized and p.sum() <= 0:
        raise ValueError(f"probabilities must be >= 0 and not all 0, got {p.tolist()}")
    return p


# -----------------------------------------------------------------------------
# restricted softmax


def _as_logits(logits: ArrayLike) -> np.ndarray:
    """Validate a 1-D float64 logit vector: non-empty, no NaN, no +inf, not all -inf."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 1 or z.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {z.shape}")
    if np.isnan(z).any():
        raise ValueError(f"logits contain NaN at positions {np.flatnonzero(np.isnan(z)).tolist()}")
    if np.isposinf(z).any():
        # +inf - +inf = NaN: there is no meaningful distribution; an upstream bug (overflowed
        # soft-cap, bad scale) should surface here rather than as silent NaN further down.
        raise ValueError(f"logits contain +inf at positions {np.flatnonzero(np.isposinf(z)).tolist()}")
    if np.isneginf(z).all():
        raise ValueError("all logits are -inf: no allowed token has any probability")
    return z


def log_restricted_softmax(logits: ArrayLike) -> np.ndarray:
    """log q_i = (z_i - m) - log sum_j exp(z_j - m), with m = max_j z_j, in float64.

    Subtracting the max makes the largest term exp(0) = 1, so the sum is in [1, n] and never
    overflows; -inf logits give exactly -inf (probability 0).

    >>> log_restricted_softmax([0.0, 0.0]).round(6).tolist()
    [-0.693147, -0.693147]
    """
    z = _as_logits(logits)  # (n,)
    with np.errstate(over="ignore"):  # finite - finite may overflow to -inf: that is probability 0
        d = z - z.max()  # (n,) all <= 0
    return d - np.log(np.exp(d).sum())


def restricted_softmax(logits: ArrayLike) -> np.ndarray:
    """q_i = exp(z_i - m) / sum_j exp(z_j - m), m = max_j z_j: the softmax over the given logits only.

    "Restricted" because the logits are those of the allowed next tokens (the children of one
    trie node), not of the whole vocabulary: the rest of the vocabulary gets no mass.

    Raises ValueError on an empty input, NaN, +inf, or when every logit is -inf.

    >>> restricted_softmax([2.1, 0.9, -0.1]).round(4).tolist()
    [0.7082, 0.2133, 0.0785]
    >>> restricted_softmax([1e308, -1e308, float("-inf")]).tolist()
    [1.0, 0.0, 0.0]
    """
    z = _as_logits(logits)  # (n,)
    with np.errstate(over="ignore"):
        e = np.exp(z - z.max())  # (n,) in [0, 1], at least one entry == 1
    return e / e.sum()


# -----------------------------------------------------------------------------
# the label trie


@dataclass(frozen=True)
class LabelTrie:
    """A prefix trie over label token paths.

    paths[j] is a tuple of token ids, owners[j] the option index it belongs to. `children` maps
    every internal node (a strict prefix of some path, root = ()) to its sorted distinct next
    tokens. Build with `LabelTrie.build`, which validates.

    >>> t = LabelTrie.build([[5], [7, 1], [7, 2]], owners=[0, 1, 1])
    >>> t.internal_nodes()
    [((), (5, 7)), ((7,), (1, 2))]
    """

    paths: tuple[Prefix, ...]
    owners: tuple[int, ...]
    children: Mapping[Prefix, tuple[int, ...]]

    @classmethod
    def build(cls, paths: Sequence[Sequence[int]], owners: Sequence[int]) -> LabelTrie:
        """Validate the paths and collect the children of every internal node.

        Rules (each violation is a ValueError naming the offending paths and their owners):
        - len(paths) == len(owners) >= 1, owners are ints >= 0, token ids are ints >= 0;
        - no empty path;
        - no two identical paths (a duplicate label: the two options could not be told apart);
        - no path is a strict prefix of another (the shorter one would be an internal node and a
          leaf at once; the caller must append an end-of-answer token to every path first).
        """
        if len(paths) != len(owners):
            raise ValueError(f"got {len(paths)} paths but {len(owners)} owners; give one owner per path")
        if len(paths) == 0:
            raise ValueError("no label paths given; a question needs at least one option")
        norm: list[Prefix] = []
        for j, (p, o) in enumerate(zip(paths, owners)):
            tp = tuple(int(x) for x in p)
            if len(tp) == 0:
                raise ValueError(f"path {j} (option {o}) is empty; every label needs at least one token")
            if any(x < 0 for x in tp):
                raise ValueError(f"path {j} (option {o}) has a negative token id: {tp}")
            if int(o) < 0:
                raise ValueError(f"owner of path {j} is {o}; option indices are >= 0")
            norm.append(tp)
        own = tuple(int(o) for o in owners)

        # identical paths and prefix relations: sort, then a path that is a prefix of another is
        # a prefix of its immediate successor in lexicographic order (tuples sort that way).
        order = sorted(range(len(norm)), key=lambda j: norm[j])
        for a, b in zip(order, order[1:]):
            pa, pb = norm[a], norm[b]
            if pa == pb:
                raise ValueError(
                    f"duplicate label: path {a} (option {own[a]}) and path {b} (option {own[b]}) "
                    f"are the same tokens {pa}; make the labels distinct"
                )
            if pb[: len(pa)] == pa:
                raise ValueError(
                    f"path {a} (option {own[a]}) {pa} is a prefix of path {b} (option {own[b]}) {pb}; "
                    "append an end-of-answer token to every path before building the trie"
                )

        kids: dict[Prefix, set[int]] = {}
        for p in norm:
            for k in range(len(p)):
                kids.setdefault(p[:k], set()).add(p[k])
        children = {u: tuple(sorted(c)) for u, c in kids.items()}
        return cls(paths=tuple(norm), owners=own, children=children)

    def internal_nodes(self) -> list[tuple[Prefix, tuple[int, ...]]]:
        """(prefix, sorted children) of every internal node in BFS order: by depth, then by prefix.

        These are the positions where the engine must read logits (prompt + prefix, last
        position), restricted to the children. A node with a single child is listed too (its
        readout is trivially 1; an engine may skip the forward step for it, see
        `path_log_probabilities`).
        """
        return [(u, self.children[u]) for u in sorted(self.children, key=lambda u: (len(u), u))]

    @property
    def depth(self) -> int:
        """Length of the longest path."""
        return max(len(p) for p in self.paths)


def readout_count(trie: LabelTrie) -> int:
    """Number of internal nodes = number of logit readouts the trie needs (root included)."""
    return len(trie.children)


# -----------------------------------------------------------------------------
# chain rule over the trie


def path_log_probabilities(trie: LabelTrie, node_logits: Mapping[Prefix, ArrayLike]) -> np.ndarray:
    """log P(t) = sum_k log q(t_k | t_<k) for every path t, in path order; shape (n_paths,).

    node_logits[u] holds the logits of node u's children, aligned with `trie.children[u]`
    (sorted token ids). A node with exactly one child may be left out: its q is 1 (log 0).

    >>> t = LabelTrie.build([[5], [7, 1], [7, 2]], owners=[0, 1, 1])
    >>> np.exp(path_log_probabilities(t, {(): [0.0, 0.0], (7,): [0.0, np.log(3.0)]})).round(4).tolist()
    [0.5, 0.125, 0.375]
    """
    logq: dict[Prefix, dict[int, float]] = {}
    for u, kids in trie.children.items():
        if u not in node_logits:
            if len(kids) == 1:
                logq[u] = {kids[0]: 0.0}
                continue
            raise ValueError(f"no logits for trie node {u} (children {kids}); the engine must read it")
        z = np.asarray(node_logits[u], dtype=np.float64)
        if z.shape != (len(kids),):
            raise ValueError(
                f"logits for trie node {u} have shape {z.shape}; expected ({len(kids)},), "
                f"one per child token {kids} in that order"
            )
        logq[u] = dict(zip(kids, log_restricted_softmax(z).tolist()))

    out = np.empty(len(trie.paths), dtype=np.float64)  # (n_paths,)
    for j, p in enumerate(trie.paths):
        out[j] = sum(logq[p[:k]][p[k]] for k in range(len(p)))
    return out


def path_probabilities(trie: LabelTrie, node_logits: Mapping[Prefix, ArrayLike]) -> np.ndarray:
    """P(t) = prod_k q(t_k | t_<k) for every path t, as exp of the summed log-softmax; (n_paths,).

    >>> t = LabelTrie.build([[5], [7, 1], [7, 2]], owners=[0, 1, 1])
    >>> path_probabilities(t, {(): [np.log(3.0), 0.0], (7,): [0.0, 0.0]}).round(4).tolist()
    [0.75, 0.125, 0.125]
    """
    return np.exp(path_log_probabilities(trie, node_logits))


def option_probabilities(
    trie: LabelTrie, node_logits: Mapping[Prefix, ArrayLike], n_options: int
) -> np.ndarray:
    """P(o) = sum_{t: owner(t)=o} P(t), renormalized so sum_o P(o) = 1; shape (n_options,), float64.

    Options with no path get 0. The renormalization is over the listed candidates only: any mass
    the model puts outside the labels was already excluded by the restricted softmax.

    >>> t = LabelTrie.build([[5], [7, 1], [7, 2]], owners=[0, 1, 1])   # option 1 has two variants
    >>> option_probabilities(t, {(): [0.0, 0.0], (7,): [0.0, 0.0]}, n_options=2).tolist()
    [0.5, 0.5]
    """
    if n_options < 1:
        raise ValueError(f"n_options must be >= 1, got {n_options}")
    if max(trie.owners) >= n_options:
        raise ValueError(f"the trie has owner {max(trie.owners)} but n_options={n_options}")
    p = path_probabilities(trie, node_logits)  # (n_paths,)
    agg = np.zeros(n_options, dtype=np.float64)  # (n_options,)
    np.add.at(agg, np.asarray(trie.owners, dtype=np.intp), p)
    total = agg.sum()
    assert total > 0.0, "a restricted softmax over a non-empty trie always leaves some mass"
    return agg / total


# -----------------------------------------------------------------------------
# label mass: how much of the full-vocabulary softmax the allowed tokens hold


def streaming_logsumexp(chunks: Iterable[ArrayLike]) -> float:
    """log Σ_i exp(z_i) over logits given in chunks (float64), never holding them all at once.

    Running max m and sum s = Σ exp(z − m): a chunk with max m' > m rescales s by exp(m − m')
    first, so every exp argument is <= 0 (no overflow) and the largest term is exp(0) = 1.

    >>> round(streaming_logsumexp([[0.0, 1.0], [2.0]]), 6), round(float(np.log(1 + np.e + np.e**2)), 6)
    (2.407606, 2.407606)
    >>> streaming_logsumexp([[-1e3], [1e3, 0.0]])   # exp(1000) alone would overflow
    1000.0
    """
    m, total = -np.inf, 0.0
    seen = False
    for chunk in chunks:
        z = _as_logits(chunk)
        cm = float(z.max())
        if cm > m:
            total = total * np.exp(m - cm) if seen else 0.0
            m = cm
        with np.errstate(over="ignore"):
            total += float(np.exp(z - m).sum())
        seen = True
    if not seen:
        raise ValueError("no logits given")
    return m + float(np.log(total))


def label_mass(allowed_logits: ArrayLike, log_partition: float) -> float:
    """Σ_{t ∈ allowed} softmax(z)_t = exp(logsumexp(z_allowed) − logsumexp(z_full)), in [0, 1].

    ``log_partition`` is the logsumexp of the full-vocabulary logits at the same position (the
    engine's ``full_logsumexp``). The allowed logits are a subset of the full ones, so the exponent
    is <= 0 in exact arithmetic; float rounding above 0 is clipped to a mass of 1.

    >>> round(label_mass([0.0, 0.0], float(np.log(4.0))), 12)
    0.5
    """
    z = _as_logits(allowed_logits)
    if not np.isfinite(log_partition):
        raise ValueError(f"log_partition must be finite, got {log_partition!r}")
    m = z.max()
    with np.errstate(over="ignore"):
        lse = m + np.log(np.exp(z - m).sum())
    return float(min(1.0, np.exp(lse - log_partition)))
