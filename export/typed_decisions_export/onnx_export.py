"""The backbone graph: a flat-cache wrapper around the base model, exported with torch.onnx (dynamo).

The graph takes `input_ids, attention_mask, position_ids, past_key_values.{i}.key/.value` and
returns `last_hidden_state, present.{i}.key/.value` (docs/FORMAT.md). One graph serves both the
prefill (empty past, past_seq = 0) and cached suffix steps. The LM head is left out: the runtime
multiplies the last hidden state by a handful of LM-head rows, never by the whole vocabulary.

`attention_mask` is 4-D, (B, 1, T, P + T) bool, True = attend (format version 2): transformers
uses a 4-D mask as is (masking_utils' `_preprocess_mask_arguments` returns early), so the runtime
decides who sees whom and can lay a tree of contexts out in one row (typed_decisions/engine/tree_block.py).
Sliding-window models keep the 2-D (B, P + T) padding mask (format version 1): a 4-D mask would
bypass the sliding mask that transformers builds from the 2-D one.

Every layer's cache is a plain `DynamicLayer` (full), also for sliding-window layers: a
`DynamicSlidingWindowLayer` would truncate the past to the window, and then the `present.*` of
different layers would have different lengths. Sliding layers are masked by transformers' sliding
mask instead, so the model computes the same thing and every `present.*` has past_seq + seq rows.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from .errors import ExportError
from .softmax_guard import drop_softmax_nan_guards_in_file

# Example sizes for tracing. Distinct and >= 2 so that dynamo neither specialises a dynamic dim to
# 0/1 nor unifies two dims that happen to share a value. Run-time sizes are free (past may be 0).
_EXAMPLE_BATCH, _EXAMPLE_SEQ, _EXAMPLE_PAST = 2, 3, 5


def base_model(model: Any) -> Any:
    """The decoder stack without the LM head (`model.model` for Llama-like models)."""
    base = getattr(model, "model", None)
    if base is None:
        base = model.get_decoder()
    return base


def input_names(num_layers: int) -> list[str]:
    """['input_ids', 'attention_mask', 'position_ids', 'past_key_values.0.key', ...]"""
    past = [f"past_key_values.{i}.{kv}" for i in range(num_layers) for kv in ("key", "value")]
    return ["input_ids", "attention_mask", "position_ids", *past]


def output_names(num_layers: int) -> list[str]:
    """['last_hidden_state', 'present.0.key', 'present.0.value', ...]"""
    return ["last_hidden_state", *(f"present.{i}.{kv}" for i in range(num_layers) for kv in ("key", "value"))]


def cache_geometry(model: Any) -> tuple[int, int, int]:
    """(num_layers, num_kv_heads, head_dim), read from a 2-token forward rather than the config.

    Configs spell these differently (head_dim absent, num_key_value_heads absent for MHA models);
    the cache the model actually builds is the ground truth for the ONNX past inputs.
    """
    import torch

    with torch.no_grad():
        out = base_model(model)(input_ids=torch.tensor([[1, 2]]), use_cache=True)
    cache = _output_cache(out)
    keys = [layer.keys for layer in cache.layers]
    if any(k is None or k.ndim != 4 for k in keys):
        raise ExportError("the model's cache is not one (batch, kv_heads, seq, head_dim) tensor per layer")
    return len(keys), int(keys[0].shape[1]), int(keys[0].shape[3])


def _output_cache(out: Any) -> Any:
    # transformers 5.2x renamed `past_key_values` to `cache` on outputs and forward arguments.
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def flat_cache_backbone(model: Any, num_layers: int) -> Any:
    """The torch module that the exporter traces (defined here so that torch is imported lazily)."""
    import torch
    from transformers import DynamicCache

    base = base_model(model)
    cache_kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"

    class FlatCacheBackbone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base = base

        def forward(self, input_ids, attention_mask, position_ids, flat_past):
            # No config given to DynamicCache: every layer is a full DynamicLayer (see module doc).
            pairs = [(flat_past[2 * i], flat_past[2 * i + 1]) for i in range(num_layers)]
            cache = DynamicCache(ddp_cache_data=pairs)
            out = self.base(
                input_ids=input_ids,  # (B, T)
                attention_mask=attention_mask,  # (B, 1, T, P + T) bool, or (B, P + T) int64
                position_ids=position_ids,  # (B, T)
                use_cache=True,
                **{cache_kw: cache},
            )
            present = []
            for layer in _output_cache(out).layers:
                present += [layer.keys, layer.values]  # each (B, kv_heads, P + T, head_dim)
            return (out.last_hidden_state, *present)  # (B, T, hidden), ...

    return FlatCacheBackbone().eval()


def example_inputs(num_layers: int, num_kv_heads: int, head_dim: int, *, mask_4d: bool = True) -> tuple:
    """Tracing inputs: (input_ids, attention_mask, position_ids, flat_past) with example sizes."""
    import torch

    b, t, p = _EXAMPLE_BATCH, _EXAMPLE_SEQ, _EXAMPLE_PAST
    input_ids = torch.randint(3, 100, (b, t))  # (B, T)
    if mask_4d:  # causal over the past: query i sees columns j <= P + i
        cols, rows = torch.arange(p + t)[None, :], p + torch.arange(t)[:, None]
        attention_mask = (cols <= rows).expand(b, 1, t, p + t).contiguous()  # (B, 1, T, P + T) bool
    else:
        attention_mask = torch.ones(b, p + t, dtype=torch.int64)  # (B, P + T)
    position_ids = torch.arange(p, p + t).expand(b, t).contiguous()  # (B, T)
    flat_past = tuple(torch.randn(b, num_kv_heads, p, head_dim) for _ in range(2 * num_layers))
    return input_ids, attention_mask, position_ids, flat_past


def export_backbone(model: Any, onnx_path: Path, *, opset: int = 18, log=print) -> dict[str, Any]:
    """Export the backbone to `onnx_path` (+ `<name>.data` external weights); returns cache facts
    and which attention_mask the graph takes ("4d", or "2d" for sliding-window models).

    The exported graph's softmax NaN guards are dropped (softmax_guard.py): the same numbers for
    every query row that sees a column, one pass less over the attention weights per layer."""
    import torch

    from .manifest import uses_sliding_window

    num_layers, num_kv_heads, head_dim = cache_geometry(model)
    module = flat_cache_backbone(model, num_layers)
    mask_4d = not uses_sliding_window(model.config)
    args = example_inputs(num_layers, num_kv_heads, head_dim, mask_4d=mask_4d)
    dynamic_shapes = (
        {0: "batch", 1: "sequence"},
        {0: "batch", 2: "sequence", 3: "total_sequence"} if mask_4d else {0: "batch", 1: "total_sequence"},
        {0: "batch", 1: "sequence"},
        tuple({0: "batch", 2: "past_sequence"} for _ in range(2 * num_layers)),
    )
    log(f"exporting backbone: {num_layers} layers, {num_kv_heads} KV heads, head_dim {head_dim}, opset {opset}, "
        f"{'4-D' if mask_4d else '2-D'} attention_mask ...")
    t0 = time.perf_counter()
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    # torch's exporter logs one line per torchvision op it cannot register (torchvision is not a
    # dependency) and prints its progress to stdout, which belongs to the CLI's JSON summary.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        # Noise, not problems: the exporter notes that the one "batch" (etc.) name shared by
        # several inputs is used once, and torch's pytree deprecation inside the exporter.
        warnings.filterwarnings("ignore", message=r".*shares the same shape constraints.*")
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
        torch.onnx.export(
            module,
            args,
            str(onnx_path),
            input_names=input_names(num_layers),
            output_names=output_names(num_layers),
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            dynamo=True,
            external_data=True,
            optimize=True,
            verbose=False,
        )
    data_path = onnx_path.with_name(onnx_path.name + ".data")
    if not data_path.is_file():
        raise ExportError(f"the exporter wrote no external-data file {data_path.name}")
    guards = drop_softmax_nan_guards_in_file(onnx_path)  # 4-D mask graphs; see softmax_guard.py
    log(f"exported backbone in {time.perf_counter() - t0:.1f} s ({guards} softmax NaN guards dropped)")
    return {"num_layers": num_layers, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
            "attention_mask": "4d" if mask_4d else "2d", "softmax_nan_guards_dropped": guards}
