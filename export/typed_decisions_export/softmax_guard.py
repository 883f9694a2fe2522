"""Drop the NaN guard that torch.onnx writes after every attention softmax.

torch's ONNX decomposition of `scaled_dot_product_attention` with a boolean mask builds one
additive bias for the whole graph and guards each layer's softmax:

    bias = Where(attention_mask, 0, -inf)                  (B, 1, S, T), once
    p    = Softmax(scores + bias)                          (B, heads, S, T), per layer
    p    = Where(IsNaN(p), 0, p)                           the guard, per layer

A fully masked query row has only -inf scores, and its softmax is 0/0 = NaN; the guard turns that
row into zeros. It reads and writes every attention probability of every layer twice more: 8.5 %
of a 1,221-token prefill of the 1.5B default model (docs/benchmarks.md).

With the bias's -inf replaced by the lowest float32 (what transformers' eager attention adds), no
score is -inf and softmax is never NaN, so the guard has nothing left to do:

- a row that sees at least one column: a masked score is lowest + s, which rounds to lowest for any
  |s| far below float32's ulp there (~2e31), and exp(lowest - max) is 0 just as exp(-inf) is: the
  same probabilities to the bit (tests/export/test_softmax_guard.py holds a graph to it);
- a fully masked row gets finite weights instead of zeros. The runtime's masks have no such row
  (every query sees itself, typed_decisions/engine/tree_block.py); a left-padded batch does (a padding
  token sees nothing), and then that padding row's output changes while every real row masks its
  column out with weight exactly 0.

A NaN that the model itself makes (an overflow) is no longer zeroed here: it reaches the logits,
which the readout refuses (typed_decisions/readout.py), instead of a silently changed answer.
Some exports already carry the lowest float32 in the bias (the tiny test models' do); there the
guard is dropped and nothing else changes. The rewrite touches only this exact pattern and leaves
any other graph as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .graph_index import GraphIndex

MASK_INPUT = "attention_mask"
LOWEST_BIAS = "attention_mask_bias_lowest"  # the new initializer: the lowest float32, not -inf


def _softmax_axis(node: Any) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), -1)


def drop_softmax_nan_guards(graph: Any, mask_input: str = MASK_INPUT) -> int:
    """Rewrite `graph` in place as the module doc says; returns the number of guards dropped.

    A guard is dropped only where the softmax (over the last axis) reads ``Add(scores, bias)``,
    ``bias = Where(mask_input, 0, -inf or lowest)`` with ``mask_input`` a graph input, and the softmax's
    output feeds exactly ``IsNaN`` and ``Where(IsNaN(p), 0, p)``.
    """
    from onnx import numpy_helper

    if mask_input not in {i.name for i in graph.input}:
        return 0
    g = GraphIndex(graph)
    producer, consumers, scalar = g.producer, g.consumers, g.scalar
    lowest = float(np.finfo(np.float32).min)

    def is_bias(name: str) -> bool:  # Where(mask_input, 0, -inf), or already Where(mask_input, 0, lowest)
        w = producer.get(name)
        return (w is not None and w.op_type == "Where" and w.input[0] == mask_input
                and scalar(w.input[1]) == 0.0 and scalar(w.input[2]) in (-np.inf, lowest))

    def feeds_softmax_only(bias: str) -> bool:  # then lowest for -inf changes nothing else
        return all(a.op_type == "Add" and all(n.op_type == "Softmax" for n in consumers.get(a.output[0], []))
                   for a in consumers[bias])

    outputs = {o.name for o in graph.output}
    guards: list[tuple[Any, Any, Any, str]] = []  # (softmax, IsNaN, Where, bias)
    for s in graph.node:
        if s.op_type != "Softmax" or _softmax_axis(s) != -1:
            continue
        add = producer.get(s.input[0])
        if add is None or add.op_type != "Add":
            continue
        bias = [i for i in add.input if is_bias(i)]
        users = consumers.get(s.output[0], [])
        isnan = [n for n in users if n.op_type == "IsNaN"]
        where = [n for n in users if n.op_type == "Where"]
        if len(bias) != 1 or len(users) != 2 or len(isnan) != 1 or len(where) != 1:
            continue
        isnan, where = isnan[0], where[0]
        if (list(where.input) != [isnan.output[0], where.input[1], s.output[0]]
                or scalar(where.input[1]) != 0.0 or consumers.get(isnan.output[0]) != [where]
                or where.output[0] in outputs or not feeds_softmax_only(bias[0])):
            continue
        guards.append((s, isnan, where, bias[0]))
    if not guards:
        return 0
    dropped = {id(n) for _, isnan, where, _ in guards for n in (isnan, where)}
    renamed = {where.output[0]: s.output[0] for s, _, where, _ in guards}  # the guard's output -> the softmax's
    biases = {bias for *_, bias in guards if scalar(producer[bias].input[2]) == -np.inf}
    infs = {producer[b].input[2] for b in biases}
    if biases:
        graph.initializer.append(numpy_helper.from_array(np.array(lowest, np.float32), LOWEST_BIAS))
    for name in biases:
        producer[name].input[2] = LOWEST_BIAS  # Where(mask, 0, lowest): no score is -inf any more
    kept = [n for n in graph.node if id(n) not in dropped]
    for n in kept:
        for k, i in enumerate(n.input):
            if i in renamed:
                n.input[k] = renamed[i]
    used = {i for n in kept for i in n.input} | {o.name for o in graph.output}
    for t in [t for t in graph.initializer if t.name in infs - used]:
        graph.initializer.remove(t)  # the -inf constant, unless something else still reads it
    del graph.node[:]
    graph.node.extend(kept)
    return len(renamed)


def drop_softmax_nan_guards_in_file(onnx_path: Path) -> int:
    """`drop_softmax_nan_guards` on a graph file with external data (the weights stay where they
    are; only the graph proto is rewritten, and only when a guard was dropped)."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    count = drop_softmax_nan_guards(model.graph)
    if count:
        onnx.save(model, str(onnx_path))
    return count


__all__ = ["drop_softmax_nan_guards", "drop_softmax_nan_guards_in_file"]
