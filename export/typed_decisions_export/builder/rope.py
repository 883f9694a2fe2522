"""RoPE inverse frequencies from a config's rope parameters, bit for bit as transformers computes them.

transformers computes `inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2) / dim))` in torch float32
(default), divides it by `factor` (linear), or rescales its low frequencies (llama3); the angles are
then `position * inv_freq`, a float32 product, done in the graph. `attention_factor` multiplies cos and
sin (1 but for yarn, whose inverse frequencies blend the scaled and unscaled ones along a ramp and
whose cos and sin are scaled by its mscale). Any other rope_type (longrope, dynamic: frequencies
that change with the sequence length) is refused with its name.

The same expressions run here in torch (lazily imported; the exporter depends on it), not numpy:
numpy's float32 power differs from torch's by an ulp or two in about one value in six (SmolLM2's
base 100000, head_dim 64: 5 of 32 values, one by 2 ulp), and an ulp of inv_freq becomes an ulp of the
angle at every position, ~3e-6 of cos and sin at position 107 for SmolLM2, where the traced graph
(whose inv_freq is transformers' buffer) and transformers agree bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BuilderError

KINDS = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class Rope:
    inv_freq: np.ndarray  # (rotary_dim // 2,) float32
    attention_factor: float = 1.0

    @property
    def key(self) -> tuple:
        return (self.inv_freq.tobytes(), self.attention_factor)


def rope_parameters(config: dict[str, Any], layer_type: str | None = None) -> dict[str, Any]:
    """The rope parameters of a config (transformers 5's `rope_parameters`, per layer type when the
    config has one dict per layer type, or the older `rope_theta` + `rope_scaling`)."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and layer_type is not None and layer_type in params:
        params = params[layer_type]
    if not params:
        params = dict(config.get("rope_scaling") or {})
        params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    params = dict(params)
    params.setdefault("rope_type", params.pop("type", "default"))
    return params


def inv_freq(params: dict[str, Any], head_dim: int, partial_rotary_factor: float = 1.0,
             max_position_embeddings: int | None = None) -> Rope:
    """The float32 inverse frequencies for one set of rope parameters (transformers'
    `_compute_default_rope_parameters`, `_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`,
    `_compute_yarn_parameters`; the config's `max_position_embeddings` for a yarn without `factor`)."""
    kind = params.get("rope_type", "default")
    if kind not in KINDS:
        raise BuilderError(f"rope_type {kind!r} is not written by the graph builder yet (it knows {', '.join(KINDS)})")
    import torch

    dim = int(head_dim * float(params.get("partial_rotary_factor", partial_rotary_factor)))
    base = params["rope_theta"]
    freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    if kind == "linear":
        freq /= params["factor"]
    elif kind == "llama3":
        freq = _llama3(freq, params)
    elif kind == "yarn":
        freq, factor = _yarn(params, dim, base, max_position_embeddings)
        return Rope(inv_freq=freq.numpy().astype(np.float32), attention_factor=factor)
    return Rope(inv_freq=freq.numpy().astype(np.float32), attention_factor=1.0)


def _mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's mscale, `0.1 * mscale * log(scale) + 1` (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(params: dict[str, Any], dim: int, base: float, max_position_embeddings: int | None) -> tuple[Any, float]:
    """YaRN (transformers `_compute_yarn_parameters`): the interpolated (/ factor) and extrapolated
    (unscaled) frequencies blended by a linear ramp over the dimensions between the correction range
    set by beta_fast and beta_slow; cos and sin scaled by the attention factor (mscale)."""
    import torch

    old_len = params["original_max_position_embeddings"]
    factor = params.get("factor")
    if factor is None:  # DeepSeek-V3: the ratio of the context lengths
        if max_position_embeddings is None:
            raise BuilderError("rope_type 'yarn' without 'factor' needs the config's max_position_embeddings")
        factor = max_position_embeddings / old_len
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = (float(_mscale(factor, mscale) / _mscale(factor, mscale_all_dim)) if mscale and mscale_all_dim
                            else _mscale(factor))
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(old_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp.to(dtype=torch.float)  # 1: the unscaled frequency, 0: the interpolated one
    return interpolation * (1 - keep) + extrapolation * keep, float(attention_factor)


def _llama3(freq: Any, params: dict[str, Any]) -> Any:
    """Llama 3.1's scaling (transformers `_compute_llama3_parameters`), on the torch float32 tensor."""
    import torch

    factor = params["factor"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    old_len = params["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)
