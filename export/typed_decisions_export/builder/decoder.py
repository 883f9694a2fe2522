"""Write the backbone graph of a DecoderSpec: the interface of docs/FORMAT.md, the same one the
traced export writes (onnx_export.py), with the weights streamed from the source one at a time.

Inputs  input_ids (B, T) int64; attention_mask (B, 1, T, S) bool [spec.mask "4d", format version 2]
        or (B, S) int64 [spec.mask "2d", version 1]; position_ids (B, T) int64;
        past_key_values.{i}.key / .value (B, kv, P, D) float32.
Outputs last_hidden_state (B, T, H); present.{i}.key / .value (B, kv, S, D) = Concat(past, new);
        hidden_state.{k} (B, T, H) for each k of `hidden_layers`: the residual stream after k decoder
        layers (transformers' hidden_states[k]; 0 the embeddings), no norm. Every position, as
        last_hidden_state: the runtime keeps the position it reads (docs/FORMAT.md has the cost).
Every layer keeps its whole cache; a sliding-window layer masks, never truncates.

A segment of the layers (the INT8 export's float reference, int8/float_reference.py) is the same
graph cut: `hidden_input` adds the input inputs_embeds (B, T, H), the previous segment's output, in
place of the embedding, and without `final_norm` last_hidden_state is the residual stream as it
leaves the segment's last layer.
"""

from __future__ import annotations

import time
from pathlib import Path
from collections.abc import Iterator, Sequence
from typing import Any, Callable

import numpy as np
from onnx import TensorProto

from . import ops
from .graph import GraphWriter, save_model, value_info
from .spec import DecoderSpec, Layer, Proj
from .weights import SafetensorsSource

DIMS = {"batch": "batch", "seq": "sequence", "past": "past_sequence", "total": "total_sequence"}


class _Weights:
    """Reads each named tensor from the source once, checks its shape, transforms and writes it."""

    def __init__(self, g: GraphWriter, source: SafetensorsSource, spec: DecoderSpec, progress: Callable[[str], None]):
        self.g, self.source, self.spec, self.progress = g, source, spec, progress
        self._rows: dict[str, np.ndarray] = {}  # a fused tensor while its row blocks are written

    def vector(self, name: str, size: int, *, offset: float = 0.0) -> str:
        w = self.source.get(name, (size,))
        if offset:
            w = (np.float32(offset) + w).astype(np.float32)  # Gemma's (1 + weight), in float32 as torch
        self.progress(name)
        return self.g.weight(name, w)

    def proj(self, p: Proj, out_features: int, in_features: int) -> tuple[str, str | None]:
        """A linear layer's weight as (in, out) for MatMul, and its bias."""
        if p.rows is None:
            w = self.source.get(p.weight, (out_features, in_features))
            name = p.weight
        else:
            if p.weight not in self._rows:
                self._rows = {p.weight: self.source.get(p.weight)}  # keeps one fused tensor at a time
            full = self._rows[p.weight]
            start, stop = p.rows
            if stop - start != out_features or full.shape[1] != in_features or stop > full.shape[0]:
                raise ValueError(f"{p.weight}: rows {p.rows} of {list(full.shape)} do not give ({out_features}, {in_features})")
            w, name = full[start:stop], f"{p.weight}[{start}:{stop}]"
        weight = self.g.matmul_weight(name, np.ascontiguousarray(w.T))
        self.progress(name)
        bias = None
        if p.bias is not None:
            b = self.source.get(p.bias, (out_features,))
            bias = self.g.weight(p.bias, b)
        return weight, bias


def row_blocks(source: Any, name: str, expect: tuple[int, int]) -> Iterator[np.ndarray]:
    """A 2-D tensor in blocks of rows when the source can read it so (the embedding and LM head:
    never the whole (V, H) float32 array), else whole."""
    if hasattr(source, "row_blocks"):
        yield from source.row_blocks(name, expect)
    else:
        yield source.get(name, expect)


def _scope(spec: DecoderSpec, i: int, *path: str) -> list[str]:
    """The module path list the dynamo exporter records (int8/smoothquant.py reads it)."""
    scope, prefix = ["", "base", f"base.layers.{i}"], f"base.layers.{i}"
    for part in path:
        prefix = f"{prefix}.{part}"
        scope.append(prefix)
    return scope + ["linear"]


def _layer(g: GraphWriter, w: _Weights, spec: DecoderSpec, i: int, layer: Layer, x: str,
           tables: Callable[[Layer], tuple[str, str, int]], bias_for: Callable[[Layer], str]) -> str:
    h, kv, d, hidden = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.hidden_size
    eps, off = spec.rms_norm_eps, spec.norm_offset
    residual = x
    x = ops.rms_norm(g, x, w.vector(layer.input_norm, hidden, offset=off), eps,
                     scope=_scope(spec, i, "input_layernorm")[:-1])  # SmoothQuant folds into it by this name
    q = ops.linear(g, x, *w.proj(layer.q, h * d, hidden), scope=_scope(spec, i, "self_attn", "q_proj"))
    k = ops.linear(g, x, *w.proj(layer.k, kv * d, hidden), scope=_scope(spec, i, "self_attn", "k_proj"))
    v = ops.linear(g, x, *w.proj(layer.v, kv * d, hidden), scope=_scope(spec, i, "self_attn", "v_proj"))
    q, k, v = (ops.split_heads(g, t, n, d) for t, n in ((q, h), (k, kv), (v, kv)))  # (B, T, n, D)
    if layer.q_norm is not None:
        q = ops.rms_norm(g, q, w.vector(layer.q_norm, d, offset=off), eps)
        k = ops.rms_norm(g, k, w.vector(layer.k_norm, d, offset=off), eps)
    q, k, v = (ops.to_heads_first(g, t) for t in (q, k, v))  # (B, n, T, D)
    cos, sin, rotary_dim = tables(layer)
    q, k = ops.apply_rope(g, q, cos, sin, d, rotary_dim), ops.apply_rope(g, k, cos, sin, d, rotary_dim)
    k_all = g.op("Concat", [f"past_key_values.{i}.key", k], axis=2, out=f"present.{i}.key")  # (B, kv, S, D)
    v_all = g.op("Concat", [f"past_key_values.{i}.value", v], axis=2, out=f"present.{i}.value")
    att = ops.attention(g, q, k_all, v_all, bias_for(layer), num_heads=h, num_kv_heads=kv, head_dim=d,
                        scale=spec.attention_scale)
    att = ops.linear(g, ops.merge_heads(g, att, h, d), *w.proj(layer.o, hidden, h * d),
                     scope=_scope(spec, i, "self_attn", "o_proj"))
    if layer.pre_mlp_norm is not None:  # Gemma's sandwich: norm after attention, then before the MLP
        att = ops.rms_norm(g, att, w.vector(layer.post_attention_norm, hidden, offset=off), eps)
        x = g.op("Add", [residual, att])
        residual = x
        x = ops.rms_norm(g, x, w.vector(layer.pre_mlp_norm, hidden, offset=off), eps)
    else:
        x = g.op("Add", [residual, att])
        residual = x
        x = ops.rms_norm(g, x, w.vector(layer.post_attention_norm, hidden, offset=off), eps,
                         scope=_scope(spec, i, "post_attention_layernorm")[:-1])
    inter = spec.intermediate_size
    gate = ops.linear(g, x, *w.proj(layer.gate, inter, hidden), scope=_scope(spec, i, "mlp", "gate_proj"))
    up = ops.linear(g, x, *w.proj(layer.up, inter, hidden), scope=_scope(spec, i, "mlp", "up_proj"))
    act = ops.activation(g, gate, spec.activation, scope=_scope(spec, i, "mlp")[:-1] + ["act"])
    y = ops.linear(g, g.op("Mul", [act, up]), *w.proj(layer.down, hidden, inter),
                   scope=_scope(spec, i, "mlp", "down_proj"))
    if layer.post_mlp_norm is not None:
        y = ops.rms_norm(g, y, w.vector(layer.post_mlp_norm, hidden, offset=off), eps)
    return g.op("Add", [residual, y])


def hidden_layer_set(num_layers: int, wanted: str | Sequence[int] = "auto") -> list[int]:
    """The mid-depth layers a graph outputs (`hidden_state.{k}`, k layers done): "auto" is n // 2 and
    2n // 3, where intermediate layers decode task information best (Skean et al., ICML 2025);
    "none" or () none; else the given ks, each in [0, n) (n is last_hidden_state, after the norm).

    >>> hidden_layer_set(30), hidden_layer_set(2), hidden_layer_set(30, "5,20"), hidden_layer_set(4, "none")
    ([15, 20], [1], [5, 20], [])
    """
    if isinstance(wanted, str):
        text = wanted.strip().lower()
        if text == "auto":
            return sorted({k for k in (num_layers // 2, 2 * num_layers // 3) if 0 < k < num_layers})
        if text in ("none", "off", ""):
            return []
        try:
            wanted = [int(part) for part in text.split(",")]
        except ValueError:
            raise ValueError(f"hidden layers {wanted!r}: expected 'auto', 'none' or layer numbers "
                             f"such as 15,20") from None
    layers = sorted(set(int(k) for k in wanted))
    bad = [k for k in layers if not 0 <= k < num_layers]
    if bad:
        raise ValueError(f"hidden layers {bad}: a mid-layer state is k in [0, {num_layers}) layers done "
                         f"(0 the embeddings; {num_layers} is last_hidden_state, already an output)")
    return layers


def geometry(spec: DecoderSpec, hidden_layers: Sequence[int] = ()) -> dict[str, Any]:
    """What the manifest records of the graph write_backbone writes for `spec` (onnx_export's keys)."""
    return {"num_layers": spec.num_layers, "num_kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
            "attention_mask": spec.mask, "softmax_nan_guards_dropped": 0, "hidden_layers": list(hidden_layers)}


def write_backbone(spec: DecoderSpec, source: SafetensorsSource, onnx_path: Path, *, opset: int = 18,
                   log=print, progress: Callable[[str], None] | None = None,
                   make_writer: Callable[[Any, str], GraphWriter] = GraphWriter,
                   hidden_input: bool = False, final_norm: bool = True,
                   hidden_layers: str | Sequence[int] = ()) -> dict[str, Any]:
    """Write `onnx_path` and `<name>.data` for `spec`; returns the geometry the manifest records.

    `make_writer(data_file, location)` makes the GraphWriter (int8/direct_writer.py's writes INT8);
    `hidden_input` / `final_norm`: a segment of the layers (module docstring); `hidden_layers`: the
    mid-layer outputs (`hidden_layer_set`; none by default, export.py asks for "auto")."""
    t0 = time.perf_counter()
    onnx_path = Path(onnx_path)
    data_path = onnx_path.with_name(onnx_path.name + ".data")
    n, kv, d, hidden = spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.hidden_size
    mids = hidden_layer_set(n, hidden_layers)
    if mids and hidden_input:
        raise ValueError("hidden_layers: a segment of the layers (hidden_input) outputs no mid-layer states")
    mask_dims = [DIMS["batch"], 1, DIMS["seq"], DIMS["total"]] if spec.mask == "4d" else [DIMS["batch"], DIMS["total"]]
    inputs = [
        value_info("input_ids", TensorProto.INT64, [DIMS["batch"], DIMS["seq"]]),
        value_info("attention_mask", TensorProto.BOOL if spec.mask == "4d" else TensorProto.INT64, mask_dims),
        value_info("position_ids", TensorProto.INT64, [DIMS["batch"], DIMS["seq"]]),
        *(value_info(f"past_key_values.{i}.{t}", TensorProto.FLOAT, [DIMS["batch"], kv, DIMS["past"], d])
          for i in range(n) for t in ("key", "value")),
    ]
    if hidden_input:
        inputs.append(value_info("inputs_embeds", TensorProto.FLOAT, [DIMS["batch"], DIMS["seq"], hidden]))
    outputs = [
        value_info("last_hidden_state", TensorProto.FLOAT, [DIMS["batch"], DIMS["seq"], hidden]),
        *(value_info(f"present.{i}.{t}", TensorProto.FLOAT, [DIMS["batch"], kv, DIMS["total"], d])
          for i in range(n) for t in ("key", "value")),
        *(value_info(f"hidden_state.{k}", TensorProto.FLOAT, [DIMS["batch"], DIMS["seq"], hidden]) for k in mids),
    ]
    log(f"builder: writing a {spec.model_type} backbone, {n} layers, {spec.num_heads} heads / {kv} KV heads, "
        f"head_dim {d}, {'4-D' if spec.mask == '4d' else '2-D'} attention_mask, opset {opset}"
        f"{', mid-layer outputs ' + ','.join(map(str, mids)) if mids else ''} ...")
    with open(data_path, "wb") as f:
        g = make_writer(f, data_path.name)
        w = _Weights(g, source, spec, progress or (lambda name: None))
        if hidden_input:
            x = "inputs_embeds"
        else:
            embed = g.weight_blocks(spec.embed, (spec.vocab_size, hidden),
                                    row_blocks(source, spec.embed, (spec.vocab_size, hidden)))
            x = g.op("Gather", [embed, "input_ids"], axis=0)
            if spec.embed_scale is not None:
                x = g.op("Mul", [x, g.const(spec.embed_scale, np.float32)])

        rope_cache: dict[tuple, tuple[str, str, int]] = {}

        def tables(layer: Layer) -> tuple[str, str, int]:
            key = layer.rope.key
            if key not in rope_cache:
                inv = g.const(layer.rope.inv_freq, np.float32)
                cos, sin = ops.rope_tables(g, "position_ids", inv, layer.rope.attention_factor)
                rope_cache[key] = (cos, sin, 2 * layer.rope.inv_freq.size)
            return rope_cache[key]

        bias_cache: dict[int | None, str] = {}

        def bias_for(layer: Layer) -> str:
            window = layer.sliding_window if spec.mask == "2d" else None
            if window not in bias_cache:
                allowed = ("attention_mask" if spec.mask == "4d"
                           else ops.mask_from_padding(g, "attention_mask", "input_ids", window))
                bias_cache[window] = ops.bias_from_bool(g, allowed)
            return bias_cache[window]

        if 0 in mids:
            g.op("Identity", [x], out="hidden_state.0")
        for i, layer in enumerate(spec.layers):
            x = _layer(g, w, spec, i, layer, x, tables, bias_for)
            if i + 1 in mids:  # the residual stream after i + 1 layers, before the next layer's norm
                g.op("Identity", [x], out=f"hidden_state.{i + 1}")
        if final_norm:
            x = ops.rms_norm(g, x, w.vector(spec.final_norm, hidden, offset=spec.norm_offset), spec.rms_norm_eps)
        g.op("Identity", [x], out="last_hidden_state")
    save_model(onnx_path, g, inputs, outputs, opset, doc=f"typed_decisions backbone ({spec.model_type}), graph builder")
    log(f"builder: wrote {onnx_path.name} + {data_path.name} ({g.bytes_written / 1e6:.1f} MB of weights) in "
        f"{time.perf_counter() - t0:.1f} s")
    return geometry(spec, mids)
