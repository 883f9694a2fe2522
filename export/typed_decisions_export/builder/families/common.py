"""What the decoder families share: reading config.json, the Llama tensor names, the mask choice."""

from __future__ import annotations

from typing import Any

from ..errors import BuilderError
from ..rope import inv_freq, rope_parameters
from ..spec import Layer, Proj


def need(config: dict[str, Any], key: str) -> Any:
    """config[key], or an error naming the key (config.json is the only source of these facts)."""
    if config.get(key) is None:
        raise BuilderError(f"config.json has no {key!r}, which the {config.get('model_type')} family needs")
    return config[key]


def heads(config: dict[str, Any]) -> tuple[int, int, int]:
    """(num_attention_heads, num_key_value_heads, head_dim), with transformers' defaults."""
    h = int(need(config, "num_attention_heads"))
    kv = int(config.get("num_key_value_heads") or h)
    d = int(config.get("head_dim") or need(config, "hidden_size") // h)
    if h % kv:
        raise BuilderError(f"num_attention_heads {h} is not a multiple of num_key_value_heads {kv}")
    return h, kv, d


def layer_types(config: dict[str, Any], window: int | None) -> list[str]:
    """Each layer's attention kind: config's layer_types, else every layer sliding when there is a window."""
    n = int(need(config, "num_hidden_layers"))
    types = config.get("layer_types")
    if types:
        if len(types) != n:
            raise BuilderError(f"config.json: layer_types has {len(types)} entries for {n} layers")
        return list(types)
    return ["sliding_attention" if window else "full_attention"] * n


def llama_layer(i: int, *, bias: bool = False, qk_norm: bool = False, prefix: str = "model") -> dict[str, Any]:
    """The tensor names of Llama-style layer i (separate q/k/v and gate/up projections)."""
    base = f"{prefix}.layers.{i}"
    attn, mlp = f"{base}.self_attn", f"{base}.mlp"

    def proj(path: str, with_bias: bool = False) -> Proj:
        return Proj(f"{path}.weight", f"{path}.bias" if with_bias else None)

    return dict(
        q=proj(f"{attn}.q_proj", bias), k=proj(f"{attn}.k_proj", bias), v=proj(f"{attn}.v_proj", bias),
        o=proj(f"{attn}.o_proj"), gate=proj(f"{mlp}.gate_proj"), up=proj(f"{mlp}.up_proj"),
        down=proj(f"{mlp}.down_proj"),
        input_norm=f"{base}.input_layernorm.weight", post_attention_norm=f"{base}.post_attention_layernorm.weight",
        q_norm=f"{attn}.q_norm.weight" if qk_norm else None, k_norm=f"{attn}.k_norm.weight" if qk_norm else None,
    )


def rope_for(config: dict[str, Any], head_dim: int, layer_type: str | None = None):
    params = rope_parameters(config, layer_type)
    return inv_freq(params, head_dim, float(config.get("partial_rotary_factor") or 1.0),
                    config.get("max_position_embeddings"))


def layers(config: dict[str, Any], window: int | None, head_dim: int, **names: Any) -> tuple[Layer, ...]:
    """Llama-style layers with their windows (sliding layers only) and RoPE."""
    out = []
    for i, kind in enumerate(layer_types(config, window)):
        sliding = kind == "sliding_attention"
        out.append(Layer(**llama_layer(i, **names), sliding_window=window if sliding else None,
                         rope=rope_for(config, head_dim)))
    return tuple(out)


def mask_kind(layers: tuple[Layer, ...]) -> str:
    """"2d" when some layer slides (a 4-D mask would bypass its window), else "4d" (manifest.uses_sliding_window)."""
    return "2d" if any(layer.sliding_window for layer in layers) else "4d"
