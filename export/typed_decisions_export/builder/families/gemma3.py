"""Gemma 3 (text): sandwich norms (after attention and around the MLP), RMSNorm times (1 + weight),
embeddings times sqrt(hidden), per-head q/k norms, tanh-GELU, scores scaled by
query_pre_attn_scalar^-1/2, and per layer type a window and a RoPE base (sliding layers: the local
base)."""

from __future__ import annotations

from typing import Any

from ..errors import FALLBACK, BuilderError
from ..spec import DecoderSpec, Layer
from . import common

MODEL_TYPES = ("gemma3_text",)


def spec(config: dict[str, Any]) -> DecoderSpec:
    h, kv, d = common.heads(config)
    if config.get("attn_logit_softcapping"):
        raise BuilderError(f"gemma3 with attn_logit_softcapping is not written by the graph builder yet; {FALLBACK}")
    if config.get("use_bidirectional_attention"):
        raise BuilderError(f"gemma3 with bidirectional attention is not a causal LM backbone; {FALLBACK}")
    hidden = int(common.need(config, "hidden_size"))
    window = int(config.get("sliding_window") or 4096)
    if not config.get("layer_types"):  # transformers: every `_sliding_window_pattern`-th layer is full
        pattern, n = int(config.get("_sliding_window_pattern") or config.get("sliding_window_pattern") or 6), int(common.need(config, "num_hidden_layers"))
        config = dict(config, layer_types=["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)])
    if not config.get("rope_parameters"):  # older configs: rope_theta (+ rope_scaling) and rope_local_base_freq
        full = dict(config.get("rope_scaling") or {}, rope_theta=config.get("rope_theta", 1_000_000.0))
        local = {"rope_type": "default", "rope_theta": config.get("rope_local_base_freq", 10_000.0)}
        config = dict(config, rope_parameters={"full_attention": full, "sliding_attention": local})
    layers = []
    for i, kind in enumerate(common.layer_types(config, window)):
        names = common.llama_layer(i, qk_norm=True)
        base = f"model.layers.{i}"
        layers.append(Layer(**names, pre_mlp_norm=f"{base}.pre_feedforward_layernorm.weight",
                            post_mlp_norm=f"{base}.post_feedforward_layernorm.weight",
                            sliding_window=window if kind == "sliding_attention" else None,
                            rope=common.rope_for(config, d, kind)))
    layers = tuple(layers)
    return DecoderSpec(
        model_type="gemma3_text", hidden_size=hidden, intermediate_size=int(common.need(config, "intermediate_size")),
        num_heads=h, num_kv_heads=kv, head_dim=d, vocab_size=int(common.need(config, "vocab_size")),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        embed="model.embed_tokens.weight", final_norm="model.norm.weight",
        lm_head="model.embed_tokens.weight" if config.get("tie_word_embeddings", True) else "lm_head.weight",
        layers=layers, attention_scale=float(config.get("query_pre_attn_scalar", 256)) ** -0.5,
        activation="gelu_tanh", embed_scale=hidden ** 0.5, norm_offset=1.0, mask=common.mask_kind(layers),
    )
