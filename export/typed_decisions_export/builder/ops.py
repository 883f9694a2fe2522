"""The building blocks of a decoder layer, each written as ONNX nodes on a GraphWriter.

Shapes in comments: B batch, T new tokens, S = P + T cache slots (past then new), H hidden,
h query heads, kv KV heads, r = h / kv queries per KV head, D head_dim.
Numerics follow transformers' float32 modules (the traced graph): RMSNorm as
`w * (x * 1/sqrt(mean(x^2) + eps))`, RoPE as `x * cos + rotate_half(x) * sin`, SiLU as
`x * sigmoid(x)`, masked scores as `q @ k.T * scale + bias` with bias 0 or the lowest float32.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import GraphWriter

LOWEST = float(np.finfo(np.float32).min)  # what transformers' eager attention adds; never -inf (softmax_guard.py)


def rms_norm(g: GraphWriter, x: str, weight: str, eps: float, *, scope: list[str] | None = None) -> str:
    """x (..., N) -> weight * x / sqrt(mean(x^2, -1) + eps)."""
    sq = g.op("Mul", [x, x], scope=scope)
    mean = g.op("ReduceMean", [sq, g.const([-1])], keepdims=1, scope=scope)
    std = g.op("Sqrt", [g.op("Add", [mean, g.const(eps, np.float32)], scope=scope)], scope=scope)
    normed = g.op("Mul", [x, g.op("Reciprocal", [std], scope=scope)], scope=scope)
    return g.op("Mul", [weight, normed], scope=scope)


def linear(g: GraphWriter, x: str, weight: str, bias: str | None, *, scope: list[str]) -> str:
    """x (..., in) @ weight (in, out) [+ bias (out,)]; the MatMul carries the module scope."""
    y = g.op("MatMul", [x, weight], scope=scope)
    return g.op("Add", [y, bias], scope=scope) if bias is not None else y


def rope_tables(g: GraphWriter, position_ids: str, inv_freq: str, attention_factor: float) -> tuple[str, str]:
    """position_ids (B, T) int64 -> cos, sin (B, 1, T, 2 * len(inv_freq)), float32."""
    pos = g.op("Cast", [g.op("Unsqueeze", [position_ids, g.const([-1])])], to=TensorProto.FLOAT)  # (B, T, 1)
    freqs = g.op("Mul", [pos, inv_freq])  # (B, T, D/2): a float32 product, as transformers' matmul of K=1
    emb = g.op("Concat", [freqs, freqs], axis=-1)  # (B, T, D)
    cos, sin = g.op("Cos", [emb]), g.op("Sin", [emb])
    if attention_factor != 1.0:
        factor = g.const(attention_factor, np.float32)
        cos, sin = g.op("Mul", [cos, factor]), g.op("Mul", [sin, factor])
    return g.op("Unsqueeze", [cos, g.const([1])]), g.op("Unsqueeze", [sin, g.const([1])])


def rotate_half(g: GraphWriter, x: str, rotary_dim: int) -> str:
    """(x1, x2) -> (-x2, x1) over the last axis of x (..., rotary_dim)."""
    half = rotary_dim // 2
    x1 = g.op("Slice", [x, g.const([0]), g.const([half]), g.const([-1])])
    x2 = g.op("Slice", [x, g.const([half]), g.const([rotary_dim]), g.const([-1])])
    return g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)


def apply_rope(g: GraphWriter, x: str, cos: str, sin: str, head_dim: int, rotary_dim: int) -> str:
    """x (B, heads, T, D) rotated on its first `rotary_dim` channels (all of them for these families)."""
    if rotary_dim == head_dim:
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotate_half(g, x, rotary_dim), sin])])
    rot = g.op("Slice", [x, g.const([0]), g.const([rotary_dim]), g.const([-1])])
    keep = g.op("Slice", [x, g.const([rotary_dim]), g.const([head_dim]), g.const([-1])])
    rotated = g.op("Add", [g.op("Mul", [rot, cos]), g.op("Mul", [rotate_half(g, rot, rotary_dim), sin])])
    return g.op("Concat", [rotated, keep], axis=-1)


def split_heads(g: GraphWriter, x: str, heads: int, head_dim: int) -> str:
    """(B, T, heads * D) -> (B, T, heads, D)."""
    return g.op("Reshape", [x, g.const([0, 0, heads, head_dim])])


def to_heads_first(g: GraphWriter, x: str) -> str:
    """(B, T, heads, D) -> (B, heads, T, D)."""
    return g.op("Transpose", [x], perm=[0, 2, 1, 3])


def group_queries(g: GraphWriter, q: str, num_kv_heads: int, n_rep: int, head_dim: int) -> str:
    """q (B, h, T, D) -> (B, kv, r, T, D): query head j reads KV head j // r, as transformers'
    repeat_kv does, without copying K and V r times."""
    return g.op("Reshape", [q, g.const([0, num_kv_heads, n_rep, -1, head_dim])])


def ungroup_queries(g: GraphWriter, x: str, num_heads: int, head_dim: int) -> str:
    """(B, kv, r, T, D) -> (B, h, T, D), the inverse of group_queries."""
    return g.op("Reshape", [x, g.const([0, num_heads, -1, head_dim])])


def attention(g: GraphWriter, q: str, k: str, v: str, bias: str, *, num_heads: int, num_kv_heads: int,
              head_dim: int, scale: float) -> str:
    """softmax(q @ k.T * scale + bias) @ v with grouped queries.

    q (B, h, T, D), k and v (B, kv, S, D) (the whole cache), bias (B, 1, 1, T, S) -> (B, h, T, D).
    """
    n_rep = num_heads // num_kv_heads
    qg = group_queries(g, q, num_kv_heads, n_rep, head_dim)  # (B, kv, r, T, D)
    kt = g.op("Transpose", [g.op("Unsqueeze", [k, g.const([2])])], perm=[0, 1, 2, 4, 3])  # (B, kv, 1, D, S)
    vg = g.op("Unsqueeze", [v, g.const([2])])  # (B, kv, 1, S, D)
    scores = g.op("MatMul", [g.op("Mul", [qg, g.const(scale, np.float32)]), kt])  # (B, kv, r, T, S)
    probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
    return ungroup_queries(g, g.op("MatMul", [probs, vg]), num_heads, head_dim)  # (B, h, T, D)


def merge_heads(g: GraphWriter, x: str, num_heads: int, head_dim: int) -> str:
    """(B, h, T, D) -> (B, T, h * D)."""
    return g.op("Reshape", [g.op("Transpose", [x], perm=[0, 2, 1, 3]), g.const([0, 0, num_heads * head_dim])])


def activation(g: GraphWriter, x: str, kind: str, *, scope: list[str]) -> str:
    """silu: x * sigmoid(x); gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    if kind == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x], scope=scope)], scope=scope)
    if kind == "gelu_tanh":
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        inner = g.op("Mul", [g.op("Add", [x, g.op("Mul", [cube, g.const(0.044715, np.float32)])]),
                             g.const(np.sqrt(2.0 / np.pi), np.float32)])
        one_plus = g.op("Add", [g.op("Tanh", [inner]), g.const(1.0, np.float32)])
        return g.op("Mul", [g.op("Mul", [x, g.const(0.5, np.float32)]), one_plus], scope=scope)
    raise ValueError(f"activation {kind!r}")


# --- masks ------------------------------------------------------------------------------------------
def bias_from_bool(g: GraphWriter, allowed: str) -> str:
    """allowed (B, 1, T, S) bool -> additive bias (B, 1, 1, T, S): 0 where allowed, else the lowest float32."""
    bias = g.op("Where", [allowed, g.const(0.0, np.float32), g.const(LOWEST, np.float32)])
    return g.op("Unsqueeze", [bias, g.const([2])])


def mask_from_padding(g: GraphWriter, padding: str, input_ids: str, window: int | None) -> str:
    """A 2-D padding mask (B, S) int64 (format version 1) -> allowed (B, 1, T, S) bool, as
    transformers builds it: new token i sits in cache slot q = P + i (P = S - T) and sees slot j when
    padding[j] and j <= q, and, in a sliding-window layer, j > q - window. Slots, not positions:
    docs/export.md, "Known limit"."""
    total = g.op("Squeeze", [g.op("Shape", [padding], start=1, end=2), g.const([0])])  # S
    seq = g.op("Squeeze", [g.op("Shape", [input_ids], start=1, end=2), g.const([0])])  # T
    past = g.op("Sub", [total, seq])
    zero, one = g.const(0), g.const(1)
    q = g.op("Unsqueeze", [g.op("Range", [past, total, one]), g.const([1])])  # (T, 1)
    j = g.op("Unsqueeze", [g.op("Range", [zero, total, one]), g.const([0])])  # (1, S)
    allowed = g.op("LessOrEqual", [j, q])  # (T, S)
    if window is not None:
        allowed = g.op("And", [allowed, g.op("Greater", [j, g.op("Sub", [q, g.const(window)])])])
    pad = g.op("Cast", [g.op("Unsqueeze", [padding, g.const([1, 2])])], to=TensorProto.BOOL)  # (B, 1, 1, S)
    return g.op("And", [pad, allowed])  # (B, 1, T, S)
