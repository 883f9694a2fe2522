"""Phi-3: the Llama layer with fused projections (qkv_proj rows: q, k, v; gate_up_proj rows: gate,
up), read as row blocks of the fused tensors. RoPE may be partial (partial_rotary_factor)."""

from __future__ import annotations

from typing import Any

from ..errors import FALLBACK, BuilderError
from ..spec import DecoderSpec, Layer, Proj
from . import common

MODEL_TYPES = ("phi3",)


def spec(config: dict[str, Any]) -> DecoderSpec:
    h, kv, d = common.heads(config)
    hidden, inter = int(common.need(config, "hidden_size")), int(common.need(config, "intermediate_size"))
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if (params.get("rope_type") or params.get("type") or "default") not in ("default",):
        raise BuilderError(f"phi3 with rope scaling {params.get('rope_type') or params.get('type')!r} (longrope) is not "
                           f"written by the graph builder yet; {FALLBACK}")
    window = config.get("sliding_window") or None
    layers = []
    for i, kind in enumerate(common.layer_types(config, window)):
        base = f"model.layers.{i}"
        qkv, gate_up = f"{base}.self_attn.qkv_proj.weight", f"{base}.mlp.gate_up_proj.weight"
        layers.append(Layer(
            q=Proj(qkv, rows=(0, h * d)), k=Proj(qkv, rows=(h * d, (h + kv) * d)),
            v=Proj(qkv, rows=((h + kv) * d, (h + 2 * kv) * d)),
            o=Proj(f"{base}.self_attn.o_proj.weight"),
            gate=Proj(gate_up, rows=(0, inter)), up=Proj(gate_up, rows=(inter, 2 * inter)),
            down=Proj(f"{base}.mlp.down_proj.weight"),
            input_norm=f"{base}.input_layernorm.weight", post_attention_norm=f"{base}.post_attention_layernorm.weight",
            sliding_window=window if kind == "sliding_attention" else None,
            rope=common.rope_for(config, d),
        ))
    layers = tuple(layers)
    return DecoderSpec(
        model_type="phi3", hidden_size=hidden, intermediate_size=inter, num_heads=h, num_kv_heads=kv, head_dim=d,
        vocab_size=int(common.need(config, "vocab_size")), rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
        embed="model.embed_tokens.weight", final_norm="model.norm.weight",
        lm_head="model.embed_tokens.weight" if config.get("tie_word_embeddings") else "lm_head.weight",
        layers=layers, attention_scale=d ** -0.5, mask=common.mask_kind(layers),
    )
