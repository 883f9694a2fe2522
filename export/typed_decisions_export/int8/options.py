"""Int8Options: what a caller chooses for an INT8 export (smoothing, activation scheme, weight bits,
down_proj levels), the defaults and the validation of those choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ExportError
from .integer import EXACT_EVERYWHERE_FORMAT, TOKEN_FORMAT, IntegerFormat

SMOOTH_DEFAULT: float | None = None  # alpha used when quantize_export is not told (None: down_proj float32)
SMOOTH_KEEP_FLOAT_DEFAULT = 0  # with smoothing: down_proj MatMuls left float32, largest inputs first
SMOOTH_NORMS_DEFAULT = False  # with smoothing: also smooth the inputs after each RMSNorm (q/k/v, gate/up)
DOWN_LEVELS_DEFAULT = 1  # with smoothing: per-token levels of each quantized down_proj input (2: two GEMMs)
WEIGHT_BITS_DEFAULT = 8  # per-token weights: 127 levels (u8·u8 graph where u8·s8 saturates) rather than 63


@dataclass(frozen=True)
class Int8Options:
    """How quantize_export makes INT8 (the method: pipeline.py, smoothquant.py). Activations are
    always quantized per token (row-independent, exact on every x86 CPU); the per-tensor scheme is a
    study (export/studies/int8_variants.py), not an option.

    smooth: SmoothQuant's alpha in [0, 1] for the MLP down_proj MatMuls, or None to keep them float32.
    keep_float: with smoothing, keep the k down_proj MatMuls with the largest calibration inputs float32.
    smooth_norms: with smoothing, also smooth the q/k/v and gate/up inputs, folding 1/s into the
        RMSNorm weights before them (norm_sites).
    weight_bits: per-token INT8 weights with 8 bits (127 levels each side; CPUs without VNNI/AMX
        run the u8·u8 companion graph, u8u8.write_u8u8_graph) or 7 bits (63 levels: one
        u8·s8 graph exact on every CPU, more drift).
    down_levels: with smoothing, each quantized down_proj input as 1 or 2 per-token levels (2: the
        second quantizes what the first missed, ~15 bits, two integer GEMMs per down_proj;
        quantized_graph.QuantizedGraph.two_levels).
    """

    smooth: float | None = SMOOTH_DEFAULT
    keep_float: int = SMOOTH_KEEP_FLOAT_DEFAULT
    smooth_norms: bool = SMOOTH_NORMS_DEFAULT
    weight_bits: int = WEIGHT_BITS_DEFAULT
    down_levels: int = DOWN_LEVELS_DEFAULT

    @property
    def integer_format(self) -> IntegerFormat:
        return {8: TOKEN_FORMAT, 7: EXACT_EVERYWHERE_FORMAT}[self.weight_bits]

    def __post_init__(self) -> None:
        if self.smooth is not None and not 0.0 <= self.smooth <= 1.0:
            raise ExportError(f"smooth={self.smooth}: SmoothQuant's alpha must be in [0, 1]")
        if self.keep_float < 0:
            raise ExportError(f"keep_float={self.keep_float}: must be >= 0")
        if (self.keep_float or self.smooth_norms) and self.smooth is None:
            raise ExportError("keep_float / smooth_norms only apply with smoothing (without it every down_proj stays float32)")
        if self.weight_bits not in (7, 8):
            raise ExportError(f"weight_bits={self.weight_bits}: expected 7 or 8")
        if self.down_levels not in (1, 2):
            raise ExportError(f"down_levels={self.down_levels}: expected 1 or 2")
        if self.down_levels == 2 and self.smooth is None:
            raise ExportError("down_levels=2 applies to quantized down_proj (smooth=ALPHA)")
