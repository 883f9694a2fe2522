"""Readout planning: the engine work of compiled requests, and what comes back per question.

    compiled requests ─ plan_readout ─▶ ReadoutPlan: one context (prefix + suffix + trie node) per
                                         trie node with more than one child, its allowed tokens,
                                         and where each readout belongs
    engine logits     ─ ReadoutPlan.readouts ─▶ Readout per question: node logits, rotations,
                                         label mass, the answer position's hidden state
                                         (and its mid-layer states, when kept)

``Readout.probabilities`` is the zero-shot answer (the chain rule over the label trie, averaged over
rotations with ``debias="rotate"``); ``fitted_probabilities`` is a fitted head's (``fitted.py``).
The Decider runs a plan on its engine; benchmarks run the same plan on other backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from . import debias as debiasing
from .compiler import CompiledQuestion, CompiledRequest
from .fitted import FittedHead
from .readout import LabelTrie, option_probabilities

__all__ = ["Readout", "ReadoutPlan", "fitted_probabilities", "plan_readout"]


@dataclass(frozen=True)
class Readout:
    """Raw readout of one question: per trie node (prefix) the children and their logits.

    With ``debias="rotate"`` the question's other option orders are ``rotations`` (each a Readout
    of its own prompt); ``probabilities`` is then their average (``debias.average``).
    ``label_mass``: this prompt's share of the full softmax on the root's tokens, when asked for.
    ``hidden``: the hidden state (H,) at the answer position (the root's context), when asked for
    (a fitted head reads it, ``fitted.py``). ``layers``: the residual stream there after each of
    the export's ``Engine.hidden_layers`` (L, H), when asked for and the export outputs them.
    """

    question: CompiledQuestion
    trie: LabelTrie
    node_logits: dict[tuple[int, ...], np.ndarray]
    rotations: tuple[Readout, ...] = ()
    label_mass: float | None = None
    hidden: np.ndarray | None = None
    layers: np.ndarray | None = None
    layer_ids: tuple[int, ...] = ()   # which layer each row of ``layers`` follows (``Engine.hidden_layers``)

    def state(self, which: Sequence[int | str]) -> np.ndarray:
        """The states ``which`` names ('last': ``hidden``; k: the residual stream after k layers),
        concatenated: what a fitted head reads (``FittedHead.layers``)."""
        parts = []
        for k in which:
            if k == "last":
                if self.hidden is None:
                    raise ValueError("the readout kept no hidden state (read with hidden=True)")
                parts.append(self.hidden)
            elif self.layers is None or k not in self.layer_ids:
                raise ValueError(f"the readout kept no state after layer {k} (kept: {list(self.layer_ids)}; "
                                 "read with layers=True from an export that outputs hidden_state.{k})")
            else:
                parts.append(self.layers[self.layer_ids.index(int(k))])
        return np.concatenate(parts).astype(np.float64)

    def own_probabilities(self) -> np.ndarray:
        """This prompt's option probabilities (the order as listed when it is rotation 0)."""
        return option_probabilities(self.trie, self.node_logits, len(self.question.options))

    def rotation_probabilities(self) -> list[np.ndarray]:
        """Every order's probabilities, in the listed option order; the listed order first."""
        return [self.own_probabilities()] + [r.own_probabilities() for r in self.rotations]

    def probabilities(self) -> np.ndarray:
        if not self.rotations:
            return self.own_probabilities()
        return debiasing.average(self.rotation_probabilities())

    def mean_label_mass(self) -> float | None:
        """The label mass, averaged over the orders when the question was rotated."""
        masses = [r.label_mass for r in (self, *self.rotations)]
        return None if any(m is None for m in masses) else float(np.mean(masses))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReadoutPlan:
    """The engine work of compiled requests: one context (prompt + trie node) per trie node with
    more than one child, the token ids allowed after it, and where each readout belongs.
    ``Decider`` runs it on its engine; benchmarks run the same plan on other backends."""

    compiled: tuple[CompiledRequest, ...]
    tries: tuple[tuple[LabelTrie, ...], ...]              # [request][unit] (``CompiledRequest.units``)
    contexts: tuple[tuple[int, ...], ...]                 # prefix + suffix + trie node, per readout
    allowed: tuple[tuple[int, ...], ...]                  # the node's children, per readout
    where: tuple[tuple[int, int, tuple[int, ...]], ...]   # (request, unit, trie node), per readout

    def readouts(self, logits: Sequence[np.ndarray],
                 masses: Mapping[tuple[int, int], float] | None = None,
                 hiddens: Mapping[tuple[int, int], np.ndarray] | None = None,
                 layers: Mapping[tuple[int, int], np.ndarray] | None = None,
                 layer_ids: tuple[int, ...] = ()) -> list[list[Readout]]:
        """The readouts of every question of every request, given one logit vector per context
        (and, when label mass was read, the mass per (request, unit); when hidden states were
        kept, the root's per (request, unit); when mid-layer states were, the root's (L, H))."""
        node_logits: list[list[dict[tuple[int, ...], np.ndarray]]] = [
            [{} for _ in comp.units()] for comp in self.compiled]
        for (ri, ui, u), z in zip(self.where, logits):
            node_logits[ri][ui][u] = z
        out = []
        for ri, comp in enumerate(self.compiled):
            units = comp.units()
            reads = [Readout(q, self.tries[ri][ui], node_logits[ri][ui],
                             label_mass=None if masses is None else masses.get((ri, ui)),
                             hidden=None if hiddens is None else hiddens.get((ri, ui)),
                             layers=None if layers is None else layers.get((ri, ui)),
                             layer_ids=layer_ids if layers is not None else ())
                     for ui, (_, _, q) in enumerate(units)]
            rotated: list[list[Readout]] = [[] for _ in comp.questions]
            for (qi, rot, _), r in zip(units, reads):
                if rot > 0:
                    rotated[qi].append(r)
            out.append([replace(r, rotations=tuple(rotated[qi])) for qi, r in enumerate(reads[: len(comp.questions)])])
        return out

    def roots(self) -> list[int]:
        """The index of each unit's root readout (where the label mass is read), in ``where`` order."""
        return [i for i, (_, _, u) in enumerate(self.where) if u == ()]


def plan_readout(compiled: Sequence[CompiledRequest], *, read_roots: bool | Sequence[bool] = False) -> ReadoutPlan:
    """Build the label tries of every question and the contexts the engine must read.

    ``read_roots`` (for every request, or one flag per request): read every trie's root even when
    it has one child (the label mass and a fitted head need the hidden state there); its logits
    then only confirm probability 1.
    """
    roots = [read_roots] * len(compiled) if isinstance(read_roots, bool) else list(read_roots)
    contexts: list[tuple[int, ...]] = []
    allowed: list[tuple[int, ...]] = []
    where: list[tuple[int, int, tuple[int, ...]]] = []
    tries: list[tuple[LabelTrie, ...]] = []
    for ri, comp in enumerate(compiled):
        request_tries = []
        for ui, (_, _, q) in enumerate(comp.units()):
            trie = LabelTrie.build(q.label_paths.paths, q.label_paths.owners)
            request_tries.append(trie)
            for u, kids in trie.internal_nodes():
                if len(kids) == 1 and not (roots[ri] and u == ()):
                    continue  # a single child has probability 1: no readout needed
                contexts.append(comp.prefix_ids + q.suffix_ids + u)
                allowed.append(kids)
                where.append((ri, ui, u))
        tries.append(tuple(request_tries))
    return ReadoutPlan(tuple(compiled), tuple(tries), tuple(contexts), tuple(allowed), tuple(where))


def fitted_probabilities(head: FittedHead, r: Readout) -> np.ndarray:
    """A fitted head's probabilities for one readout, in the question's listed option order: the
    head reads the root hidden state and the zero-shot probabilities in its class order."""
    idx = head.order(r.question.options)                # listed index of each class
    fitted = head.probabilities(r.state(head.layers), r.probabilities()[idx])
    p = np.empty_like(fitted)
    p[idx] = fitted
    return p
