"""What a family file tells the decoder writer: the numbers, the tensor names, and the few switches
in which the decoder families differ. Everything else (the graph's inputs and outputs, the mask, the
cache layout) is the same for every family and lives in decoder.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .rope import Rope


@dataclass(frozen=True)
class Proj:
    """One linear layer: a weight (out, in) in the source, an optional bias, and optionally a block
    of its rows (fused projections such as Phi-3's qkv_proj, read as three)."""

    weight: str
    bias: str | None = None
    rows: tuple[int, int] | None = None  # [start, stop) of the source weight's rows


@dataclass(frozen=True)
class Layer:
    """One decoder layer's tensors and attention facts."""

    q: Proj
    k: Proj
    v: Proj
    o: Proj
    gate: Proj
    up: Proj
    down: Proj
    input_norm: str
    post_attention_norm: str  # Llama: the norm before the MLP; Gemma: after attention (sandwich)
    pre_mlp_norm: str | None = None  # Gemma: the norm before the MLP
    post_mlp_norm: str | None = None  # Gemma: the norm after the MLP
    q_norm: str | None = None  # Qwen3, Gemma 3: RMSNorm over each head's query / key
    k_norm: str | None = None
    sliding_window: int | None = None  # this layer attends to the last `sliding_window` cache slots
    rope: Rope | None = None


@dataclass(frozen=True)
class DecoderSpec:
    """A decoder-only transformer with RMSNorm, RoPE, grouped-query attention and a gated MLP."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    embed: str  # the input embedding (vocab, hidden)
    final_norm: str
    lm_head: str  # the output embedding (vocab, hidden): `embed` when tied
    layers: tuple[Layer, ...]
    attention_scale: float  # multiplies q @ k.T (1/sqrt(head_dim) unless the family says otherwise)
    activation: str = "silu"  # "silu" or "gelu_tanh"
    embed_scale: float | None = None  # Gemma: embeddings times sqrt(hidden)
    norm_offset: float = 0.0  # Gemma: RMSNorm multiplies by (offset + weight)
    mask: str = "4d"  # "4d" (format version 2) or "2d" (sliding-window models, version 1)
    module_prefix: str = "model"  # the source's prefix of the base model's tensors (metadata scopes)
    extra: dict = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def n_rep(self) -> int:
        return self.num_heads // self.num_kv_heads


Transform = Callable[[np.ndarray], np.ndarray]
