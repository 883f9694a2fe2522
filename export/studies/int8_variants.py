"""INT8 variants kept for studies and negative controls, not written by the exporter.

The exporter (typed_decisions_export.int8) writes one scheme: per-token activations, blocked
QuantizeLinear where the opset allows. The variants below were measured on the way there
(docs/export.md) and stay reproducible here, built on the exporter's own writer
(matmul_rewrite.MatMulRewrite, quantized_graph.QuantizedGraph) by overriding its steps:

- per-tensor activations (`activations="per_tensor"`): the pattern ONNX Runtime's quantize_dynamic
  emits (one uint8 scale per tensor per run, int8 weights), batch-dependent and, without VNNI,
  subject to int16 saturation: the documented negative the tests show failing
  (quantize_export_per_tensor makes a whole export of it);
- float32 channels (`float_channels`): LLM.int8()'s decomposition with the outlier channels fixed
  at calibration (float_channels picks them);
- `blocked_quantize=False`: the four-op per-token quantization (Div, Round, Add, Cast) even where
  the opset could be raised to 21, the oracle the blocked QuantizeLinear is compared with.

Not a package: tests load it by path (tests/td_studies.py) and int8_study.py imports it beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from typed_decisions_export.errors import ExportError
from typed_decisions_export.int8.external_data import DataWriter
from typed_decisions_export.int8.integer import TOKEN_FORMAT, IntegerFormat, default_opset
from typed_decisions_export.int8.matmul_rewrite import MatMulRewrite, rewrite_matmuls
from typed_decisions_export.int8.options import Int8Options
from typed_decisions_export.int8.pipeline import Int8Plan, plan_down_proj, quantize_export_with
from typed_decisions_export.int8.quantized_graph import QuantizedGraph

ACTIVATIONS = ("per_token", "per_tensor")
# The manifest's `integer_format` of a per-tensor export: its u8*s8 pair sums reach 2 * 255 * 127.
PER_TENSOR_FORMAT = {"activations": "per tensor, asymmetric uint8 (DynamicQuantizeLinear)",
                     "weights": "per output column, int8", "pair_bound": 2 * 255 * 127, "exact_without_vnni": False}


def float_channels(act_absmax: np.ndarray, count: int) -> np.ndarray:
    """The `count` channels of an activation with the largest calibration maxima (ascending
    indices): those kept float32 in every MatMul that reads it (quantize_matmuls_study(float_channels=...)).

    >>> float_channels(np.array([1.0, 9.0, 2.0, 30.0, 0.5]), 2).tolist()
    [1, 3]
    """
    act = np.asarray(act_absmax, np.float64)
    count = min(max(int(count), 0), act.size)
    return np.sort(np.argsort(-act, kind="stable")[:count]).astype(np.int64)


class StudyGraph(QuantizedGraph):
    """QuantizedGraph with float32 channels (split_channels) and per-tensor activations (per_tensor)."""

    def __init__(self, opset: int, fmt: IntegerFormat, per_token: bool = True):
        super().__init__(opset, fmt)
        self.per_token_activations = per_token
        self._float_parts: dict[str, str] = {}  # x -> x[..., channels] for inputs with float32 channels

    def split_channels(self, x: str, channels: np.ndarray, width: int) -> None:
        """Keep `channels` of `x` out of the integers: returns the name of the tensor whose
        integers are made (x with those channels zeroed) and records x[..., channels] (float32)
        for `matmul` to multiply by the matching weight rows (every MatMul reading x).

            x W = x_int W_int + x[..., C] W[C, :]        x_int = x * mask, mask[C] = 0

        The few channels with the largest activations (C) set each token's scale when they are
        in it; without them the other channels get their levels back."""
        if x in self._float_parts:
            return
        h, T = self._helper, self._T
        mask = np.ones(width, np.float32)
        mask[channels] = 0.0
        self.inits += [
            h.make_tensor(f"{x}_float_channels", T.INT64, [len(channels)], np.asarray(channels, np.int64).tolist()),
            h.make_tensor(f"{x}_int_mask", T.FLOAT, [width], mask.tobytes(), raw=True),
        ]
        self.nodes += [
            h.make_node("Gather", [x, f"{x}_float_channels"], [f"{x}_float_part"], f"{x}_float_gather", axis=-1),
            h.make_node("Mul", [x, f"{x}_int_mask"], [f"{x}_int_part"], f"{x}_int_mask_mul"),
        ]
        self._float_parts[x] = f"{x}_float_part"

    def per_tensor(self, x: str) -> tuple[str, str, str]:
        """(xq uint8, sx scalar, zx scalar): ONNX's DynamicQuantizeLinear, one asymmetric scale for
        the whole tensor of one run (what quantize_dynamic emits; depends on batch-mates)."""
        if x not in self._inputs:
            self._inputs[x] = (f"{x}_quantized", f"{x}_scale", f"{x}_zero_point")
            self.nodes.append(self._helper.make_node("DynamicQuantizeLinear", [x], list(self._inputs[x]), f"{x}_QuantizeLinear"))
        return self._inputs[x]

    def matmul(self, node: Any, wq_name: str, sw_name: str, zw_name: str, width: int,
               float_rows: str | None = None) -> None:
        """Y = (Xq - zx) (Wq - 0) · sw · sx in place of the float MatMul `node`; when x has float32
        channels (split_channels), Xq is made from x without them and Y gains x[..., C] · float_rows
        (the weight rows W[C, :], float32)."""
        h, T = self._helper, self._T
        x, y, tag = node.input[0], node.output[0], node.name or node.output[0]
        split = x in self._float_parts
        if split != (float_rows is not None):
            raise ValueError(f"{tag}: float32 channels of {x} and float32 weight rows go together")
        if split:
            x, y = f"{x}_int_part", f"{tag}_int_part"
        if self.per_token_activations:
            self.integer_matmul(x, y, tag, wq_name, sw_name, zw_name, width, two_level=node.input[0] in self.two_level)
        else:  # the pattern ONNX Runtime fuses into MatMulIntegerToFloat
            xq, sx, zx = self.per_tensor(x)
            self.nodes += [
                h.make_node("MatMulInteger", [xq, wq_name, zx, zw_name], [f"{tag}_int32"], f"{tag}_quant"),
                h.make_node("Cast", [f"{tag}_int32"], [f"{tag}_float"], f"{tag}_cast", to=T.FLOAT),
                h.make_node("Mul", [sx, sw_name], [f"{tag}_scales"], f"{tag}_scales_mul"),
                h.make_node("Mul", [f"{tag}_float", f"{tag}_scales"], [y], f"{tag}_rescale"),
            ]
        if split:
            self.nodes += [
                h.make_node("MatMul", [self._float_parts[node.input[0]], float_rows], [f"{tag}_float_part"], f"{tag}_float_matmul"),
                h.make_node("Add", [y, f"{tag}_float_part"], [node.output[0]], f"{tag}_parts_add"),
            ]


class StudyRewrite(MatMulRewrite):
    """MatMulRewrite with the study options (see quantize_matmuls_study)."""

    def __init__(self, fmt: IntegerFormat = TOKEN_FORMAT, two_level: set[str] | None = None, activations: str = "per_token",
                 float_channels: dict[str, np.ndarray] | None = None, blocked_quantize: bool = True):
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations={activations!r}: expected one of {ACTIVATIONS}")
        super().__init__(fmt, two_level)
        self.per_token = activations == "per_token"
        self.float_channels = {x: np.unique(np.asarray(c, np.int64)) for x, c in (float_channels or {}).items() if len(c)}
        if self.float_channels and not self.per_token:
            raise ValueError("float32 channels are kept only with per-token activations")
        if two_level and not self.per_token:
            raise ValueError("two-level activations are per token only")
        self.blocked_quantize = blocked_quantize

    @property
    def contrib_ops(self) -> bool:  # type: ignore[override]
        return self.per_token

    @property
    def weight_levels(self) -> int:
        return self.fmt.weight_levels if self.per_token else 127

    def opset(self, model: Any) -> int:
        if self.per_token and self.blocked_quantize:
            return super().opset(model)
        return default_opset(model, 18)

    def graph(self, opset: int) -> StudyGraph:
        out = StudyGraph(opset, self.fmt, self.per_token)
        out.two_level = set(self.two_level)
        return out

    def weight(self, node: Any, w: np.ndarray, writer: DataWriter, out: QuantizedGraph) -> tuple[np.ndarray, str | None]:
        from onnx import TensorProto

        x, w_name = node.input[0], node.input[1]
        if x not in self.float_channels:
            return w, None
        assert isinstance(out, StudyGraph)
        channels = self.float_channels[x]
        if channels.max() >= w.shape[0]:
            raise ValueError(f"float32 channels of {x} go up to {channels.max()}, but {w_name} has {w.shape[0]} rows")
        rows_t = TensorProto(name=f"{w_name}_float_rows", data_type=TensorProto.FLOAT, dims=[len(channels), w.shape[1]])
        writer.add_array(rows_t, w[channels, :])  # (C, N) float32
        w = w.copy()
        w[channels, :] = 0.0  # their products are the float32 part's; not in the column scales
        out.split_channels(x, channels, w.shape[0])
        out.inits.append(rows_t)
        return w, rows_t.name

    def matmul(self, out: QuantizedGraph, node: Any, wq_name: str, sw_name: str, zw_name: str, width: int,
               float_part: str | None) -> None:
        assert isinstance(out, StudyGraph)
        out.matmul(node, wq_name, sw_name, zw_name, width, float_part)


def quantize_matmuls_study(
    src: Path,
    dst: Path,
    *,
    exclude: set[str],
    scale_rows: dict[str, np.ndarray] | None = None,
    scale_cols: dict[str, np.ndarray] | None = None,
    activations: str = "per_token",
    fmt: IntegerFormat = TOKEN_FORMAT,
    float_channels: dict[str, np.ndarray] | None = None,
    two_level: set[str] | None = None,
    blocked_quantize: bool = True,
    log=print,
) -> int:
    """matmul_rewrite.quantize_matmuls with the study options; with their defaults, the same graph.

    `activations="per_token"` (default) as the exporter writes it. `"per_tensor"`: the pattern ONNX
    Runtime's quantize_dynamic emits (one uint8 scale per tensor per run, int8 weights) —
    batch-dependent and, without VNNI, subject to int16 saturation; kept as the reference the tests
    show failing.

    `float_channels` (activation tensor name -> channel indices) keeps those channels of that
    input out of the integers of every MatMul reading it: they are multiplied in float32 by their
    weight rows and added (`StudyGraph.split_channels`), LLM.int8()'s decomposition with the
    outlier channels fixed at calibration. Per token only.

    `two_level`: as quantize_matmuls. Per token only.

    `blocked_quantize=False`: the source opset is kept and Div, Round, Add, Cast are written even
    where one blocked QuantizeLinear could be (the same integers, four passes over each activation)."""
    rewrite = StudyRewrite(fmt, two_level, activations, float_channels, blocked_quantize)
    return rewrite_matmuls(src, dst, rewrite, exclude=exclude, scale_rows=scale_rows, scale_cols=scale_cols, log=log)


def decide_per_tensor(src_onnx: Path, options: Int8Options, tok: Any, facts: dict[str, Any], log) -> Int8Plan:
    """pipeline.decide for per-tensor activations: no two levels, no u8*u8 twin, 127 weight levels."""
    if options.down_levels != 1:
        raise ExportError("down_levels=2 applies to per-token activations only")
    smoothing = plan_down_proj(src_onnx, options, tok, facts, log)
    return Int8Plan(options, smoothing, StudyRewrite(options.integer_format, activations="per_tensor"), None,
                    "per_tensor", dict(PER_TENSOR_FORMAT))


def quantize_export_per_tensor(src_dir: Path, out_dir: Path | None = None, options: Int8Options | None = None, *,
                               force: bool = False, progress: bool = True) -> dict[str, Any]:
    """quantize_export with per-tensor activations: the documented negative (answers depend on
    batch-mates and cache splits; the runtime runs such exports one row per call and refuses them
    on CPUs without VNNI/AMX)."""
    return quantize_export_with(decide_per_tensor, src_dir, out_dir, options, force=force, progress=progress)
