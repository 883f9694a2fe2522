"""Streaming per-channel INT8 for the constant-weight MatMuls of an ONNX graph with external data.

Every MatMul with a constant 2-D float weight becomes, by default,

    sx = max_k |X[..., k]| / 127                one scale per token (row), shape (..., 1)
    Xq = QuantizeLinear(X, sx, 128, block_size=K) = saturate(Round(X / sx) + 128)
                                                in [1, 255]; shared by the MatMuls reading X
    Y  = MatMulIntegerToFloat(Xq, Wq int8 (K, N), sx, sw (N,), 128, 0)
       = float(sum_k (Xq - 128) Wq) * sw * sx

with symmetric 8-bit weights per output column (`sw = max|W[:, n]| / 127`, `Wq = rint(W / sw)` in
[-127, 127], stored int8). MatMulIntegerToFloat (ONNX Runtime's contrib op) multiplies the int32
sums by sw in its GEMM's output stage and then by sx: the numbers of MatMulInteger, Cast, Mul(sw),
Mul(sx) to the bit, without writing and re-reading three (tokens x N) tensors in between. Likewise
one blocked QuantizeLinear (opset 21; a block is a whole row, so its scale is the row's) makes the
integers that Div, Round, Add, Cast made, to the bit, in one pass over X instead of four; the
writer raises the graph's opset to 21 for it (ONNX Runtime >= 1.18) unless told not to.
Two properties follow, and the tests hold the graph to both:

- *row independence*: a token's output depends on its own activations only, so a prompt's answer
  is the same alone, in a batch with other prompts, or split into a cached prefix and a step;
- *the same integers on every x86 CPU*: VNNI and AMX accumulate u8·s8 products in int32, exact.
  CPUs without them (AVX2; AVX-512 without VNNI) sum pairs of u8·s8 products in a saturating
  int16, which 8-bit weights overflow, so for them `write_u8u8_graph` writes a second graph over
  the same weight file that feeds each weight as uint8 W + 128 (zero point 128) to the u8·u8
  kernel, which widens to int16 and cannot saturate. (With 7-bit weights, EXACT_EVERYWHERE_FORMAT,
  one u8·s8 graph is exact everywhere, at more drift: max |dp| 0.086 vs 0.057 on the 8 drift
  probes of the 1.5B default model, docs/export.md.)

`activations="per_tensor"` writes instead the pattern ONNX Runtime's `quantize_dynamic` emits
(DynamicQuantizeLinear: one asymmetric uint8 scale per tensor per run, 8-bit weights), which has
neither property; it is kept as the reference the batch-independence tests show failing.

Why not `onnxruntime.quantization.quantize_dynamic` itself: it loads every external weight into
memory, copies the model for shape inference and keeps float and int8 copies side by side; on the
6 GB float32 Qwen2.5-1.5B backbone it passed 17 GB of RSS and was killed on a 24 GB machine. This
module reads one weight at a time and streams every initializer into the new data file, so the
peak memory is about one weight matrix.

Optionally, named weights are rescaled per row or per column while they stream through (before
quantization, or as float32 when the weight is not quantized): this is how SmoothQuant's
smoothing vectors are folded into the graph (quantize.py), one weight in memory at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib ops (MatMulIntegerToFloat)
BLOCKED_QUANTIZE_OPSET = 21  # QuantizeLinear / DequantizeLinear with block_size
BLOCKED_QUANTIZE_IR_VERSION = 10  # the IR version of opset 21
_ALIGN = 4096  # page-aligned offsets let ONNX Runtime memory-map the external data
_COPY_CHUNK = 64 << 20


def _external(tensor: Any) -> dict[str, str] | None:
    if tensor.data_location != 1:  # onnx.TensorProto.EXTERNAL
        return None
    return {e.key: e.value for e in tensor.external_data}


def read_weight(tensor: Any, base: Path) -> np.ndarray:
    """One float32 initializer as an array, reading only its own bytes of the external data file."""
    from onnx import numpy_helper

    ext = _external(tensor)
    if ext is None:
        return numpy_helper.to_array(tensor)
    count = int(np.prod(tensor.dims))
    data = np.fromfile(base / ext["location"], dtype=np.float32, count=count, offset=int(ext.get("offset", 0)))
    return data.reshape(tuple(tensor.dims))


def scale_weight(w: np.ndarray, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> np.ndarray:
    """`W[k, n] * rows[k] * cols[n]` for a (K, N) weight (`w[k] * rows[k]` for a (K,) vector, e.g.
    a norm's weight), computed in float64, returned float32.

    >>> scale_weight(np.ones((2, 3), np.float32), rows=np.array([1.0, 2.0]), cols=np.array([1.0, 0.5, 4.0])).tolist()
    [[1.0, 0.5, 4.0], [2.0, 1.0, 8.0]]
    """
    out = w.astype(np.float64)
    if rows is not None:
        if rows.shape != (w.shape[0],):
            raise ValueError(f"row scale of shape {rows.shape} for a weight of shape {w.shape}")
        out *= np.asarray(rows, np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    if cols is not None:
        if cols.shape != (w.shape[1],):
            raise ValueError(f"column scale of shape {cols.shape} for a weight of shape {w.shape}")
        out *= np.asarray(cols, np.float64)[None, :]
    return out.astype(np.float32)


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
    (benchmarks/int8_kernels.py checks each format against an exact int64 matmul on the machine.)

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
ACTIVATIONS = ("per_token", "per_tensor")


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


class _DataWriter:
    """Appends tensors to one external-data file and points their TensorProto at it."""

    def __init__(self, f: BinaryIO, location: str):
        self.f, self.location = f, location

    def _place(self, tensor: Any, length: int) -> None:
        offset = -self.f.tell() % _ALIGN
        self.f.write(b"\0" * offset)
        start = self.f.tell()
        del tensor.external_data[:]
        tensor.data_location = 1
        for key, value in (("location", self.location), ("offset", str(start)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value

    def add_array(self, tensor: Any, array: np.ndarray) -> None:
        self._place(tensor, array.nbytes)
        self.f.write(np.ascontiguousarray(array).tobytes())

    def copy_external(self, tensor: Any, base: Path) -> None:
        ext = _external(tensor)
        length, offset = int(ext["length"]), int(ext.get("offset", 0))
        self._place(tensor, length)
        with open(base / ext["location"], "rb") as src:
            src.seek(offset)
            left = length
            while left:
                block = src.read(min(left, _COPY_CHUNK))
                self.f.write(block)
                left -= len(block)


class _QuantizedGraph:
    """The nodes and initializers of the rewritten graph, built one MatMul at a time.

    Each activation tensor is quantized once however many MatMuls read it (q/k/v share their
    input, as do gate/up)."""

    def __init__(self, opset: int, fmt: IntegerFormat):
        from onnx import TensorProto, helper

        self.opset, self.fmt = opset, fmt
        self.blocked = opset >= BLOCKED_QUANTIZE_OPSET  # per-token integers from one QuantizeLinear
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._inputs: dict[str, tuple[str, str, str]] = {}
        self._float_parts: dict[str, str] = {}  # x -> x[..., channels] for inputs with float32 channels
        self.two_level: set[str] = set()  # inputs quantized as two per-token levels (two_levels)
        self._constants_added = False
        self._constant_names: set[str] = set()  # shape constants added by _constant
        self._helper, self._T = helper, TensorProto

    def _constant(self, name: str, values: list[int]) -> str:
        """An int64 1-D initializer `name` holding `values`, added once."""
        if name not in self._constant_names:
            self.inits.append(self._helper.make_tensor(name, self._T.INT64, [len(values)], values))
            self._constant_names.add(name)
        return name

    def _constants(self) -> None:
        if self._constants_added:
            return
        h, T, f = self._helper, self._T, self.fmt
        self.inits += [
            h.make_tensor("per_token_zero_point", T.UINT8, [], [f.act_zero_point]),
            h.make_tensor("per_token_inv_levels", T.FLOAT, [], [1.0 / f.act_levels]),
            h.make_tensor("per_token_tiny", T.FLOAT, [], [1e-30]),
        ]
        if self.opset >= 18:
            self.inits.append(h.make_tensor("per_token_axes", T.INT64, [1], [-1]))
        if not self.blocked:
            self.inits.append(h.make_tensor("per_token_zero_point_f", T.FLOAT, [], [float(f.act_zero_point)]))
        self._constants_added = True

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

    def per_token(self, x: str, width: int) -> tuple[str, str, str]:
        """(xq uint8, sx (..., 1), zero point) for `x` (last axis `width`): one symmetric scale per
        token (row),

            sx = max(max_k |x[..., k]|, tiny) / L        xq = saturate<uint8>(Round(x / sx) + L + 1)

        with L = fmt.act_levels, so a row's integers depend on that row alone (|Round(x / sx)| <= L,
        nothing saturates). From opset 21 on, one QuantizeLinear whose block is the whole row
        (block_size=width; its zero point expanded to the scale's shape, as blocked quantization
        asks); before, Div, Round, Add and Cast. Both round half to even: the same integers."""
        if x in self._inputs:
            return self._inputs[x]
        self._constants()
        h, t = self._helper, f"{x}_tok"
        reduce = (h.make_node("ReduceMax", [f"{t}_abs", "per_token_axes"], [f"{t}_absmax"], f"{t}_reducemax", keepdims=1)
                  if self.opset >= 18 else
                  h.make_node("ReduceMax", [f"{t}_abs"], [f"{t}_absmax"], f"{t}_reducemax", axes=[-1], keepdims=1))
        names = (f"{t}_quantized", f"{t}_scale", "per_token_zero_point")
        self.nodes += [
            h.make_node("Abs", [x], [f"{t}_abs"], f"{t}_abs"),
            reduce,                                                                          # (..., 1)
            h.make_node("Max", [f"{t}_absmax", "per_token_tiny"], [f"{t}_absmax_pos"], f"{t}_max"),
            h.make_node("Mul", [f"{t}_absmax_pos", "per_token_inv_levels"], [names[1]], f"{t}_scale"),
        ]
        if self.blocked:  # the GEMM keeps the scalar zero point; QuantizeLinear's has the scale's shape
            self.nodes += [
                h.make_node("Shape", [names[1]], [f"{t}_scale_shape"], f"{t}_scale_shape"),
                h.make_node("Expand", ["per_token_zero_point", f"{t}_scale_shape"], [f"{t}_zero_point"], f"{t}_zero_point"),
                h.make_node("QuantizeLinear", [x, names[1], f"{t}_zero_point"], [names[0]], f"{t}_quantize",
                            axis=-1, block_size=width),                                      # (..., K) uint8
            ]
        else:
            self.nodes += [
                h.make_node("Div", [x, names[1]], [f"{t}_scaled"], f"{t}_div"),                  # (..., K)
                h.make_node("Round", [f"{t}_scaled"], [f"{t}_rounded"], f"{t}_round"),           # [-L, L]
                h.make_node("Add", [f"{t}_rounded", "per_token_zero_point_f"], [f"{t}_shifted"], f"{t}_shift"),
                h.make_node("Cast", [f"{t}_shifted"], [names[0]], f"{t}_cast", to=self._T.UINT8),
            ]
        self._inputs[x] = names
        return names

    def two_levels(self, x: str, width: int) -> list[tuple[str, str, str]]:
        """x as two per-token levels, x ~ s1 q1 + s2 q2: the first is `per_token(x)`, the second
        quantizes what the first missed, r = x - s1 Round(x / s1), with its own scale per token
        (|r| <= s1 / 2, so s2 ~ s1 / 254: about 15 bits per token in all). Every MatMul reading x
        then runs two integer GEMMs and adds them. For inputs whose tokens hold a few huge channels
        (down_proj's): one level leaves the other channels a handful of levels.

        s1 Round(x / s1) is the first level's integers times its scale: from QuantizeLinear's
        integers, DequantizeLinear over the rows of x flattened to (rows, K) with one scale per row
        (axis 0; ONNX Runtime's blocked DequantizeLinear is 8x slower on down_proj's input), i.e.
        (q - zp) * s on exact small integers, the float32 product Mul of the Round gives (the
        four-op form)."""
        first = self.per_token(x, width)
        h, t = self._helper, f"{x}_tok"
        r = f"{x}_remainder"
        if r not in self._inputs:
            if self.blocked:
                rows_k = self._constant(f"per_token_rows_{width}", [-1, width])
                flat = self._constant("per_token_flat", [-1])
                self.nodes += [
                    h.make_node("Reshape", [first[0], rows_k], [f"{t}_rows"], f"{t}_rows"),                # (rows, K)
                    h.make_node("Reshape", [first[1], flat], [f"{t}_row_scale"], f"{t}_row_scale"),       # (rows,)
                    h.make_node("Shape", [f"{t}_row_scale"], [f"{t}_rows_count"], f"{t}_rows_count"),
                    h.make_node("Expand", ["per_token_zero_point", f"{t}_rows_count"], [f"{t}_row_zero_point"], f"{t}_row_zero_point"),
                    h.make_node("DequantizeLinear", [f"{t}_rows", f"{t}_row_scale", f"{t}_row_zero_point"], [f"{t}_level1_rows"],
                                f"{t}_level1_rows", axis=0),
                    h.make_node("Shape", [x], [f"{t}_shape"], f"{t}_shape"),
                    h.make_node("Reshape", [f"{t}_level1_rows", f"{t}_shape"], [f"{t}_level1"], f"{t}_level1"),
                ]
            else:
                self.nodes.append(h.make_node("Mul", [f"{t}_rounded", first[1]], [f"{t}_level1"], f"{t}_level1"))
            self.nodes.append(h.make_node("Sub", [x, f"{t}_level1"], [r], f"{t}_remainder"))
        return [first, self.per_token(r, width)]

    def per_tensor(self, x: str) -> tuple[str, str, str]:
        """(xq uint8, sx scalar, zx scalar): ONNX's DynamicQuantizeLinear, one asymmetric scale for
        the whole tensor of one run (what quantize_dynamic emits; depends on batch-mates)."""
        if x not in self._inputs:
            self._inputs[x] = (f"{x}_quantized", f"{x}_scale", f"{x}_zero_point")
            self.nodes.append(self._helper.make_node("DynamicQuantizeLinear", [x], list(self._inputs[x]), f"{x}_QuantizeLinear"))
        return self._inputs[x]

    def matmul(self, node: Any, wq_name: str, sw_name: str, zw_name: str, width: int, per_token: bool,
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
        if per_token and node.input[0] in self.two_level:  # two GEMMs, one per level, added
            levels = self.two_levels(x, width)
            for i, (xq, sx, zx) in enumerate(levels):
                self.nodes.append(h.make_node("MatMulIntegerToFloat", [xq, wq_name, sx, sw_name, zx, zw_name],
                                              [f"{tag}_level{i + 1}"], f"{tag}_quant{i + 1}", domain=MS_DOMAIN))
            self.nodes.append(h.make_node("Add", [f"{tag}_level1", f"{tag}_level2"], [y], f"{tag}_levels_add"))
        elif per_token:  # one kernel: int32 products * sw (N,) in the GEMM's epilogue, then * sx (..., 1)
            xq, sx, zx = self.per_token(x, width)
            self.nodes.append(h.make_node("MatMulIntegerToFloat", [xq, wq_name, sx, sw_name, zx, zw_name], [y],
                                          f"{tag}_quant", domain=MS_DOMAIN))
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


# Ops whose meaning changed between opset 18 and 21 (GroupNormalization-21 scales per channel,
# -18 per group): a graph holding one keeps its opset and the four-op quantization.
_CHANGED_BY_OPSET_21 = {"GroupNormalization"}


def _can_raise_to_blocked_opset(model: Any, opset: int) -> bool:
    """Whether the graph's default-domain opset can be raised to 21 without changing what any
    node means: from 18 (the exporter's; 18 moved the Reduce* axes and Split's outputs to inputs,
    so older graphs would break) to 20 the changes are new types and attributes with the old
    defaults, except the ops in _CHANGED_BY_OPSET_21. Functions and subgraphs are checked too."""
    if opset >= BLOCKED_QUANTIZE_OPSET:
        return True
    if opset < 18:
        return False

    def ops(graph: Any):
        for node in graph.node:
            yield node
            for attr in node.attribute:
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    yield from ops(g)

    nodes = list(ops(model.graph)) + [n for f in model.functions for n in f.node]
    return not any(n.domain in ("", "ai.onnx") and n.op_type in _CHANGED_BY_OPSET_21 for n in nodes)


def quantize_matmuls(
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
    """Write `dst` (+ `dst.data`): `src` with every constant-weight 2-D MatMul not in `exclude`
    (node names) turned into dynamic INT8. Returns the number of MatMuls quantized.

    `activations="per_token"` (default): each activation row is quantized with its own scale in
    `fmt` (IntegerFormat: exact on every x86 CPU class), so a token's result depends on its own
    inputs only, never on the other rows of the run or on how a prompt was split into cached
    steps. `"per_tensor"`: the pattern ONNX Runtime's quantize_dynamic emits (one uint8 scale per
    tensor per run, int8 weights) — batch-dependent and, without VNNI, subject to int16
    saturation; kept as the reference the tests show failing.

    `scale_rows` / `scale_cols` (initializer name -> vector) rescale 2-D float weights while they
    are streamed, `W[k, :] *= scale_rows[name][k]` and `W[:, n] *= scale_cols[name][n]` (ONNX
    MatMul weights are (K, N) = (in, out)), before quantizing them or, for a weight that stays
    float32 (`exclude`d, or not a MatMul weight), in its float32 copy.

    `float_channels` (activation tensor name -> channel indices) keeps those channels of that
    input out of the integers of every MatMul reading it: they are multiplied in float32 by their
    weight rows and added (`_QuantizedGraph.split_channels`), LLM.int8()'s decomposition with the
    outlier channels fixed at calibration. Per token only.

    `two_level` (activation tensor names): those inputs are quantized as two per-token levels
    (`_QuantizedGraph.two_levels`, ~15 bits), each MatMul reading them running two integer GEMMs.
    Per token only.

    `blocked_quantize` (default): per-token integers from one blocked QuantizeLinear, the graph's
    opset raised to 21 when that changes no node's meaning (from 18-20; `_can_raise_to_blocked_opset`);
    otherwise, or with False, the source opset is kept and Div, Round, Add, Cast are written (the
    same integers, four passes over each activation)."""
    import onnx
    from onnx import TensorProto, helper

    if activations not in ACTIVATIONS:
        raise ValueError(f"activations={activations!r}: expected one of {ACTIVATIONS}")
    per_token = activations == "per_token"
    float_channels = {x: np.unique(np.asarray(c, np.int64)) for x, c in (float_channels or {}).items() if len(c)}
    if float_channels and not per_token:
        raise ValueError("float32 channels are kept only with per-token activations")
    if two_level and not per_token:
        raise ValueError("two-level activations are per token only")
    model = onnx.load(str(src), load_external_data=False)
    graph, base = model.graph, src.parent
    inits = {t.name: t for t in graph.initializer}
    scale_rows, scale_cols = dict(scale_rows or {}), dict(scale_cols or {})
    for name in set(scale_rows) | set(scale_cols):
        t = inits.get(name)
        if t is None or t.data_type != TensorProto.FLOAT or len(t.dims) not in (1, 2) or (len(t.dims) == 1 and name in scale_cols):
            raise ValueError(f"cannot rescale {name!r}: not a 2-D (or, by rows, 1-D) float32 initializer of {src.name}")

    def read(name: str) -> np.ndarray:  # (K, N) float32, rescaled when asked
        w = read_weight(inits[name], base)
        if name in scale_rows or name in scale_cols:
            w = scale_weight(w, scale_rows.get(name), scale_cols.get(name))
        return w

    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1

    def quantizable(node: Any) -> bool:
        w = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        return w is not None and node.name not in exclude and w.data_type == TensorProto.FLOAT and len(w.dims) == 2

    opset = default_opset(model, 18)
    if per_token and blocked_quantize and _can_raise_to_blocked_opset(model, opset):
        opset = BLOCKED_QUANTIZE_OPSET
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = opset
        model.ir_version = max(model.ir_version, BLOCKED_QUANTIZE_IR_VERSION)
    out = _QuantizedGraph(opset, fmt)
    out.two_level = set(two_level or ())
    weight_levels = fmt.weight_levels if per_token else 127
    data_name = dst.name + ".data"
    dropped, count = set(), 0
    with open(dst.parent / data_name, "wb") as f:
        writer = _DataWriter(f, data_name)
        for node in graph.node:
            if not quantizable(node):
                out.nodes.append(node)
                continue
            w_name, x = node.input[1], node.input[0]
            w, rows_t = read(w_name), None  # (K, N)
            if x in float_channels:
                channels = float_channels[x]
                if channels.max() >= w.shape[0]:
                    raise ValueError(f"float32 channels of {x} go up to {channels.max()}, but {w_name} has {w.shape[0]} rows")
                rows_t = TensorProto(name=f"{w_name}_float_rows", data_type=TensorProto.FLOAT, dims=[len(channels), w.shape[1]])
                writer.add_array(rows_t, w[channels, :])  # (C, N) float32
                w = w.copy()
                w[channels, :] = 0.0  # their products are the float32 part's; not in the column scales
                out.split_channels(x, channels, w.shape[0])
                out.inits.append(rows_t)
            wq, scale = quantize_weight_per_column(w, weight_levels)  # (K, N), (N,)
            del w
            wq_t = TensorProto(name=f"{w_name}_quantized", data_type=TensorProto.INT8, dims=wq.shape)
            writer.add_array(wq_t, wq)  # (K, N), straight to the data file
            zw_t = helper.make_tensor(f"{w_name}_zero_point", TensorProto.INT8, [wq.shape[1]], np.zeros(wq.shape[1], np.int8).tobytes(), raw=True)
            sw_t = helper.make_tensor(f"{w_name}_scale", TensorProto.FLOAT, [wq.shape[1]], scale.tobytes(), raw=True)
            out.inits += [wq_t, zw_t, sw_t]
            out.matmul(node, wq_t.name, sw_t.name, zw_t.name, wq.shape[0], per_token, None if rows_t is None else rows_t.name)
            uses[w_name] -= 1
            if uses[w_name] == 0:
                dropped.add(w_name)
            count += 1
            if count % 20 == 0:
                log(f"  quantized {count} MatMuls ...")
        kept = [t for t in graph.initializer if t.name not in dropped]
        for t in kept:
            if t.name in scale_rows or t.name in scale_cols:
                w = read(t.name)
                for field in ("raw_data", "float_data"):
                    t.ClearField(field)
                writer.add_array(t, w)
            elif _external(t) is not None:
                writer.copy_external(t, base)
    del graph.node[:]
    graph.node.extend(out.nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + out.inits)
    if per_token and count and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    onnx.save(model, str(dst))
    return count


def write_u8u8_graph(src: Path, dst: Path) -> int:
    """Write `dst`: the graph of `src` (a per-token INT8 graph) for CPUs whose u8·s8 kernel
    saturates (no VNNI/AMX), computing the same integers. Returns the number of weights rewritten.

    ONNX Runtime's u8·s8 kernel on such CPUs sums pairs of u8·s8 products in a saturating int16
    (VPMADDUBSW), which 8-bit weights overflow; its u8·u8 kernel widens both to int16 and sums in
    int32 (VPMADDWD), exact for any 8-bit operands. So each int8 weight W of a MatMulInteger is
    fed as the uint8 W + 128 with zero point 128 — (x - 128)(W + 128 - 128) = (x - 128) W, the same
    integers. W + 128 is W's bit pattern with the sign bit flipped, `BitwiseXor(Cast<uint8>(W), 128)`
    (Cast wraps modulo 256), computed on the initializer, which ONNX Runtime folds once when the
    session starts (about 10 ns a weight on 2 cores). Only the graph is written: `dst` reads the
    weights from `src`'s external data file (same directory), so the export stores them once."""
    import onnx
    from onnx import TensorProto, helper

    if dst.parent.resolve() != src.parent.resolve():
        raise ValueError(f"{dst} must sit beside {src}: it reads {src.name}'s external data file")
    model = onnx.load(str(src), load_external_data=False)
    opset = default_opset(model, 0)
    if opset < 18:
        raise ValueError(f"{src}: opset {opset}; the u8·u8 graph needs BitwiseXor (opset 18)")
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    int8_weights = {n for n, t in inits.items() if t.data_type == TensorProto.INT8 and len(t.dims) == 2}
    prelude, rewritten, zero_points = [], {}, {}
    for node in graph.node:
        zp_at = {"MatMulInteger": 3, "MatMulIntegerToFloat": 5}.get(node.op_type)
        if zp_at is None or len(node.input) <= zp_at or node.input[1] not in int8_weights:
            continue
        w, zp = node.input[1], inits[node.input[zp_at]]
        if w not in rewritten:
            rewritten[w] = f"{w}_u8"
            prelude += [
                helper.make_node("Cast", [w], [f"{w}_bits"], f"{w}_u8u8_cast", to=TensorProto.UINT8),
                helper.make_node("BitwiseXor", [f"{w}_bits", "u8u8_sign_bit"], [rewritten[w]], f"{w}_u8u8_shift"),
            ]
        if zp.name not in zero_points:
            zero_points[zp.name] = helper.make_tensor(f"{zp.name}_u8", TensorProto.UINT8, list(zp.dims),
                                                      np.full(tuple(zp.dims), 128, np.uint8).tobytes(), raw=True)
        node.input[1], node.input[zp_at] = rewritten[w], zero_points[zp.name].name
    if not rewritten:
        raise ValueError(f"{src}: no MatMulInteger(ToFloat) with an int8 weight to rewrite")
    nodes = prelude + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [t for t in graph.initializer if t.name not in zero_points]  # the int8 zero points: unused now
    del graph.initializer[:]
    graph.initializer.extend(kept + [helper.make_tensor("u8u8_sign_bit", TensorProto.UINT8, [], [128]), *zero_points.values()])
    onnx.save(model, str(dst))
    return len(rewritten)
