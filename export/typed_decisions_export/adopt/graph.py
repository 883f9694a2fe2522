"""The graph rewrite: find the LM head of a decoder graph that returns `logits`, and cut it off.

A decoder exported for generation (Optimum's `model.onnx`) ends in

    hidden (B, S, H) --MatMul W (H, V)--> (B, S, V) [--Mul s--] [--Div c--Tanh--Mul c--] --> logits

The adopter walks back from `logits` through the ops that may follow the head (Identity, Cast, a
multiplication or division by a scalar constant, Tanh), reaches the head's MatMul (or Gemm), and
reads its weight initializer (stored (H, V), or (V, H) behind a Transpose: the tied embedding).
Everything after the head is folded into the two numbers the format knows: `logit_scale` and the
soft-cap `final_logit_softcapping` (logits = c * tanh(s * x / c)). The cut graph returns the
head's input as `last_hidden_state` and keeps every `present.*`; the nodes and initializers that
only the head needed are dropped. Anything else on that path is refused, named, never guessed.

These are pure functions of an `onnx.ModelProto`; source.py decides what a graph must offer first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..graph_index import GraphIndex
from .errors import AdoptError

PAST_RE = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
PRESENT_RE = re.compile(r"^present\.(\d+)\.(key|value)$")
LOGITS = "logits"
HIDDEN = "last_hidden_state"
# Ops that may sit between the head's MatMul and `logits` without changing which rows are read.
_PASS_THROUGH = {"Identity", "Cast"}


@dataclass(frozen=True)
class Head:
    """The LM head found in a graph, and what follows it up to `logits`."""

    node: str  # name of the MatMul / Gemm node
    op_type: str  # "MatMul" or "Gemm"
    hidden: str  # the head's input tensor, (B, S, H): becomes `last_hidden_state`
    weight_name: str  # the initializer holding the head's weight
    weight: np.ndarray = field(repr=False)  # (V, H), as the format stores it
    stored_transposed: bool = False  # the initializer is (V, H) (tied embedding behind a Transpose, or Gemm transB)
    logit_scale: float = 1.0
    softcap: float | None = None
    tail: tuple[str, ...] = ()  # op types from the head to `logits`, in graph order


def _describe(node) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}'" + (f" ({node.domain})" if node.domain else "")


def _weight(g: GraphIndex, name: str, head) -> tuple[str, np.ndarray, bool]:
    """(initializer name, (V, H) weight, stored (V, H)?) of `name`, the second input of the head
    node `head`, through Transpose and Cast nodes to a constant."""
    transposed = False
    while g.constant(name) is None:
        node = g.producer.get(name)
        if node is not None and node.op_type == "Transpose" and _perm(node) in (None, [1, 0]):
            transposed, name = not transposed, node.input[0]
        elif node is not None and node.op_type == "Cast":
            name = node.input[0]
        else:
            what = _describe(node) if node is not None else f"graph input '{name}'"
            raise AdoptError(f"the LM head {_describe(head)} multiplies by {what}, not by a weight "
                             "initializer: quantized or computed heads cannot be adopted (format 1 "
                             "stores a float LM head)")
    w = g.constant(name)
    if w.ndim != 2 or not np.issubdtype(w.dtype, np.floating):
        raise AdoptError(f"the LM head {_describe(head)} has a {w.dtype} weight of shape {list(w.shape)}; "
                         "expected a 2-D float matrix")
    # MatMul computes x @ W with W (H, V): the format wants (V, H).
    return name, (w if transposed else w.T), transposed


def _perm(node) -> list[int] | None:
    for attr in node.attribute:
        if attr.name == "perm":
            return list(attr.ints)
    return None


def _gemm_attrs(node) -> dict[str, float]:
    out = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    for attr in node.attribute:
        out[attr.name] = attr.f if attr.type == attr.FLOAT else attr.i
    return out


def _fold_tail(ops: list[tuple[str, float | None]]) -> tuple[float, float | None]:
    """(logit_scale s, soft-cap c) of the ops between head and logits, in graph order.

    ``("mul", f)`` multiplies, ``("tanh", None)`` is the soft-cap's tanh: with P the product of the
    factors before tanh and Q after it, logits = Q * tanh(P * x) = c * tanh(s * x / c) for c = Q,
    s = P * Q. Without tanh, s is the product of all factors.

    >>> _fold_tail([("mul", 0.5)])
    (0.5, None)
    >>> _fold_tail([("mul", 1 / 30.0), ("tanh", None), ("mul", 30.0)])
    (1.0, 30.0)
    """
    tanhs = [i for i, (op, _) in enumerate(ops) if op == "tanh"]
    if len(tanhs) > 1:
        raise AdoptError("the logits pass through more than one Tanh after the LM head; only one "
                         "soft-cap (c * tanh(x / c)) is supported")
    factors = [f for op, f in ops if op == "mul"]
    if not tanhs:
        return float(np.prod(factors)) if factors else 1.0, None
    pre = float(np.prod([f for op, f in ops[: tanhs[0]] if op == "mul"]))
    post = float(np.prod([f for op, f in ops[tanhs[0] + 1 :] if op == "mul"]))
    if post <= 0:
        raise AdoptError(f"the soft-cap after the LM head multiplies tanh by {post}; expected a positive cap")
    return pre * post, post


def find_head(graph) -> Head:
    """Walk back from `logits` to the LM head; fold the ops after it into (logit_scale, soft-cap)."""
    g = GraphIndex(graph)
    outputs = [o.name for o in graph.output]
    if LOGITS not in outputs:
        raise AdoptError(f"the graph has no '{LOGITS}' output (outputs: {', '.join(outputs[:6])}"
                         f"{', ...' if len(outputs) > 6 else ''}): not a causal-LM decoder export")
    name, tail_rev, ops_rev = LOGITS, [], []
    while True:
        node = g.producer.get(name)
        if node is None:
            raise AdoptError(f"'{LOGITS}' comes straight from graph input or initializer '{name}': "
                             "no LM head to locate")
        if node.op_type in ("MatMul", "Gemm"):
            break
        tail_rev.append(node.op_type)
        if node.op_type in _PASS_THROUGH:
            name = node.input[0]
        elif node.op_type == "Tanh":
            ops_rev.append(("tanh", None))
            name = node.input[0]
        elif node.op_type in ("Mul", "Div") and len(node.input) == 2:
            consts = [g.scalar(i) for i in node.input]
            if node.op_type == "Mul" and consts[0] is not None and consts[1] is None:
                ops_rev.append(("mul", consts[0]))
                name = node.input[1]
            elif consts[1] is not None and consts[0] is None:
                ops_rev.append(("mul", consts[1] if node.op_type == "Mul" else 1.0 / consts[1]))
                name = node.input[0]
            else:
                raise AdoptError(f"could not locate the LM head: walking back from '{LOGITS}' met "
                                 f"{_describe(node)}, which is not a scaling by one constant")
        else:
            hint = (" (an LM-head bias: format 1 has none)" if node.op_type == "Add" else
                    " (a block-quantized LM head: format 1 stores a float head; export the head "
                    "unquantized)" if node.op_type == "MatMulNBits" else "")
            raise AdoptError(f"could not locate the LM head: walking back from '{LOGITS}' met "
                             f"{_describe(node)}{hint}; only Identity, Cast, Mul/Div by a constant "
                             "and Tanh (soft-cap) may follow the head's MatMul/Gemm")
    ops = list(reversed(ops_rev))
    if node.op_type == "Gemm":
        attrs = _gemm_attrs(node)
        if attrs["transA"]:
            raise AdoptError(f"the LM head {_describe(node)} transposes its input (transA=1)")
        if len(node.input) > 2 and node.input[2] and np.any(g.constant(node.input[2]) != 0):
            raise AdoptError(f"the LM head {_describe(node)} adds a bias: format 1 has no LM-head bias")
        ops.insert(0, ("mul", attrs["alpha"]))
        weight_name, weight, transposed = _weight(g, node.input[1], node)
        if attrs["transB"]:  # Gemm with transB=1 stores (V, H) already
            weight, transposed = weight.T, not transposed
    else:
        weight_name, weight, transposed = _weight(g, node.input[1], node)
    scale, softcap = _fold_tail(ops)
    return Head(node=node.name, op_type=node.op_type, hidden=node.input[0], weight_name=weight_name,
                weight=np.ascontiguousarray(weight), stored_transposed=transposed, logit_scale=scale,
                softcap=softcap, tail=tuple(reversed(tail_rev)))


def _layer_key(name: str) -> tuple[int, int]:
    """'past_key_values.3.value' / 'present.3.value' -> (3, 1)."""
    m = PAST_RE.match(name) or PRESENT_RE.match(name)
    assert m, name
    return int(m.group(1)), 0 if m.group(2) == "key" else 1


def _used_names(node) -> set[str]:
    """The node's inputs plus every outer-scope name its subgraphs (If / Loop bodies) read."""
    used = set(node.input)
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in sub.node:
                used |= _used_names(inner)
    return used


def cut_head(model, head: Head):
    """Rewrite `model` IN PLACE to return (last_hidden_state, present.*) and no logits (docs/FORMAT.md).

    In place because a copy of a multi-GB graph would double the adopter's peak memory; the
    self-check reads the unmodified graph from the source file, not from this object.

    Inputs are put in the format's order (input_ids, attention_mask, position_ids, past by layer,
    key before value) and outputs likewise (last_hidden_state, present by layer); nodes and
    initializers nothing else needs (the head, the soft-cap) are dropped.
    """
    from onnx import helper

    g = model.graph
    dtype = helper.np_dtype_to_tensor_dtype(head.weight.dtype)
    g.node.append(helper.make_node("Identity", [head.hidden], [HIDDEN], name="adopt/last_hidden_state"))
    hidden_out = helper.make_tensor_value_info(HIDDEN, dtype, ["batch_size", "sequence_length", head.weight.shape[1]])
    presents = sorted((o for o in g.output if PRESENT_RE.match(o.name)), key=lambda o: _layer_key(o.name))
    kept_outputs = [hidden_out, *presents]
    del g.output[:]
    g.output.extend(kept_outputs)

    needed = {o.name for o in kept_outputs}
    kept_nodes = []
    for node in reversed(list(g.node)):  # graph nodes are topologically sorted
        if any(out in needed for out in node.output):
            kept_nodes.append(node)
            needed |= _used_names(node)
    kept_nodes.reverse()
    del g.node[:]
    g.node.extend(kept_nodes)
    kept_inits = [init for init in g.initializer if init.name in needed]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    kept_info = [vi for vi in g.value_info if vi.name in needed]
    del g.value_info[:]
    g.value_info.extend(kept_info)

    order = {"input_ids": (-3, 0), "attention_mask": (-2, 0), "position_ids": (-1, 0)}
    # (anything else, which source.py refuses in a decoder, keeps its place after these)
    inputs = sorted(g.input, key=lambda i: order.get(i.name) or (_layer_key(i.name) if PAST_RE.match(i.name) else (1 << 30, 0)))
    del g.input[:]
    g.input.extend(inputs)
    return model


__all__ = ["HIDDEN", "Head", "LOGITS", "PAST_RE", "PRESENT_RE", "cut_head", "find_head"]
