"""The integer format of INT8 (pure maths, no graph): how per-token activations and per-column
weights are stored as integers and which x86 kernels compute them exactly (IntegerFormat and its
two formats), per-column weight quantization, and the opset a model imports (default_opset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class IntegerFormat:
    """How per-token activations and per-column weights are stored as integers, and which x86
    kernels compute them exactly.

    Activations: symmetric per token (row), `xq = rint(x / sx)` in [-act_levels, act_levels] with
    `sx = max_k |x[k]| / act_levels`, stored as uint8 `xq + act_zero_point`. Weights: symmetric
    per output column in [-weight_levels, weight_levels], int8. ONNX Runtime's u8·s8 kernel on
    CPUs without VNNI (AVX2, AVX-512 without VNNI) adds each pair of products into a saturating
    int16 (VPMADDUBSW); VNNI and AMX accumulate in int32. When every pair sum stays within

        2 · max(stored activation) · weight_levels = `pair_bound` <= 32,767

    the u8·s8 graph is exact on every x86 class (`exact_without_vnni`); otherwise CPUs without
    VNNI/AMX run the u8·u8 graph of the same weights (write_u8u8_graph), exact for any 8-bit pair.
    (benchmarks/studies/int8_kernels.py checks each format against an exact int64 matmul on the machine.)

    >>> TOKEN_FORMAT.pair_bound, TOKEN_FORMAT.exact_without_vnni  # 8-bit weights: u8·u8 graph without VNNI
    (64770, False)
    >>> EXACT_EVERYWHERE_FORMAT.act_zero_point, EXACT_EVERYWHERE_FORMAT.pair_bound
    (128, 32130)
    """

    act_levels: int = 127
    weight_levels: int = 63

    @property
    def act_zero_point(self) -> int:
        return self.act_levels + 1

    @property
    def pair_bound(self) -> int:
        return 2 * (self.act_zero_point + self.act_levels) * self.weight_levels

    @property
    def exact_without_vnni(self) -> bool:
        """Whether ONNX Runtime's u8·s8 kernel computes it exactly on CPUs without VNNI/AMX; when
        not, those CPUs run the u8·u8 companion graph (write_u8u8_graph)."""
        return self.pair_bound <= INT16_MAX

    def describe(self) -> dict[str, Any]:
        return {"activations": f"per token, symmetric, {self.act_levels} levels each side, uint8 around {self.act_zero_point}",
                "weights": f"per output column, symmetric, {self.weight_levels} levels each side, int8",
                "pair_bound": self.pair_bound, "exact_without_vnni": self.exact_without_vnni}


INT16_MAX = 32767
TOKEN_FORMAT = IntegerFormat(act_levels=127, weight_levels=127)  # 8-bit activations, 8-bit weights
EXACT_EVERYWHERE_FORMAT = IntegerFormat(act_levels=127, weight_levels=63)  # 7-bit weights: one graph for every CPU


def default_opset(model: Any, missing: int) -> int:
    """The version of the default ONNX domain a model imports (`missing` when it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), missing)


def quantize_weight_per_column(w: np.ndarray, levels: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output column of a (K, N) weight: (Wq int8 (K, N), scale float32 (N,)).

    >>> q, s = quantize_weight_per_column(np.array([[1.0, -0.5], [-2.0, 0.25]], np.float32))
    >>> q.tolist(), [round(float(x), 5) for x in s]
    ([[64, -127], [-127, 64]], [0.01575, 0.00394])
    """
    absmax = np.abs(w).max(axis=0)  # (N,)
    scale = np.where(absmax > 0, absmax / float(levels), 1.0).astype(np.float32)  # (N,)
    q = np.clip(np.rint(w / scale), -levels, levels).astype(np.int8)  # (K, N)
    return q, scale

