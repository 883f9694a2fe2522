"""Llama, Mistral, Qwen2 and Qwen3: RMSNorm, RoPE, grouped-query attention, SiLU-gated MLP.

They differ in three switches: Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm, and Mistral's
(and Qwen2's, when `use_sliding_window`) sliding window. Defaults are transformers' for keys a
saved config.json leaves out (it writes only what differs from them).
"""

from __future__ import annotations

from typing import Any

from ..errors import FALLBACK, BuilderError
from ..spec import DecoderSpec
from . import common

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def _window(config: dict[str, Any]) -> int | None:
    kind = config["model_type"]
    if kind == "mistral":
        return config.get("sliding_window", 4096) or None
    if kind in ("qwen2", "qwen3"):  # a window only with use_sliding_window (off by default)
        return config.get("sliding_window") if config.get("use_sliding_window", False) else None
    return None


def spec(config: dict[str, Any]) -> DecoderSpec:
    kind = config["model_type"]
    h, kv, d = common.heads(config)
    window = _window(config)
    if kind in ("qwen2", "qwen3") and window and not config.get("layer_types"):
        # transformers: only layers from max_window_layers on slide
        start = int(config.get("max_window_layers", config["num_hidden_layers"]))
        config = dict(config, layer_types=["sliding_attention" if i >= start else "full_attention"
                                           for i in range(config["num_hidden_layers"])])
    if config.get("mlp_bias") or (kind != "qwen2" and config.get("attention_bias")):
        raise BuilderError(f"{kind} with attention_bias / mlp_bias (biases on o_proj or the MLP) is not written "
                           f"by the graph builder yet; {FALLBACK}")
    bias = kind == "qwen2"
    layers = common.layers(config, window, d, bias=bias, qk_norm=kind == "qwen3")
    tied = bool(config.get("tie_word_embeddings", False))  # builder.py falls back to embed when there is no lm_head
    return DecoderSpec(
        model_type=kind,
        hidden_size=int(common.need(config, "hidden_size")),
        intermediate_size=int(common.need(config, "intermediate_size")),
        num_heads=h, num_kv_heads=kv, head_dim=d,
        vocab_size=int(common.need(config, "vocab_size")),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        embed="model.embed_tokens.weight", final_norm="model.norm.weight",
        lm_head="model.embed_tokens.weight" if tied else "lm_head.weight",
        layers=layers, attention_scale=d ** -0.5, mask=common.mask_kind(layers),
    )
