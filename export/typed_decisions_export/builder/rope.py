"""RoPE inverse frequencies from a config's rope parameters, in numpy float32 as transformers does.

transformers computes `inv_freq = 1 / base ** (arange(0, dim, 2) / dim)` in float32 (default), divides
it by `factor` (linear), or rescales its low frequencies (llama3); the angles are then
`position * inv_freq`, a float32 product, done in the graph. `attention_factor` multiplies cos and
sin (1 for the kinds here). Any other rope_type is refused with its name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BuilderError

KINDS = ("default", "linear", "llama3")


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


def inv_freq(params: dict[str, Any], head_dim: int, partial_rotary_factor: float = 1.0) -> Rope:
    """The float32 inverse frequencies for one set of rope parameters."""
    kind = params.get("rope_type", "default")
    if kind not in KINDS:
        raise BuilderError(f"rope_type {kind!r} is not written by the graph builder yet (it knows {', '.join(KINDS)})")
    dim = int(head_dim * float(params.get("partial_rotary_factor", partial_rotary_factor)))
    base = np.float32(params["rope_theta"])
    exponents = (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)).astype(np.float32)
    freq = (np.float32(1.0) / np.power(base, exponents, dtype=np.float32)).astype(np.float32)
    if kind == "linear":
        freq = (freq / np.float32(params["factor"])).astype(np.float32)
    elif kind == "llama3":
        freq = _llama3(freq, params)
    return Rope(inv_freq=freq, attention_factor=1.0)


def _llama3(freq: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """Llama 3.1's scaling (transformers `_compute_llama3_parameters`)."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_len = float(params["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / freq
    scaled = np.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)
