"""The nodes and initializers of an INT8 graph, written one MatMul at a time (QuantizedGraph).

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
writer raises the graph's opset to 21 for it (ONNX Runtime >= 1.18) where that changes no node's
meaning, and writes the four ops otherwise.
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

The pattern ONNX Runtime's `quantize_dynamic` emits (DynamicQuantizeLinear: one asymmetric uint8
scale per tensor per run, 8-bit weights) has neither property; it is written only by the studies
(export/studies/int8_variants.py), as the reference the batch-independence tests show failing.
"""

from __future__ import annotations

from typing import Any

from .integer import IntegerFormat

MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib ops (MatMulIntegerToFloat)
BLOCKED_QUANTIZE_OPSET = 21  # QuantizeLinear / DequantizeLinear with block_size


class QuantizedGraph:
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

    def matmul(self, node: Any, wq_name: str, sw_name: str, zw_name: str, width: int) -> None:
        """Y = (Xq - zx) (Wq - 0) · sw · sx in place of the float MatMul `node`."""
        x = node.input[0]
        self.integer_matmul(x, node.output[0], node.name or node.output[0], wq_name, sw_name, zw_name, width,
                            two_level=x in self.two_level)

    def integer_matmul(self, x: str, y: str, tag: str, wq_name: str, sw_name: str, zw_name: str, width: int,
                       two_level: bool) -> None:
        """y = (Xq - zx) (Wq - 0) · sw · sx from the per-token integers of `x` (one level, or two when
        `two_level`), its nodes named after `tag`."""
        h = self._helper
        if two_level:  # two GEMMs, one per level, added
            levels = self.two_levels(x, width)
            for i, (xq, sx, zx) in enumerate(levels):
                self.nodes.append(h.make_node("MatMulIntegerToFloat", [xq, wq_name, sx, sw_name, zx, zw_name],
                                              [f"{tag}_level{i + 1}"], f"{tag}_quant{i + 1}", domain=MS_DOMAIN))
            self.nodes.append(h.make_node("Add", [f"{tag}_level1", f"{tag}_level2"], [y], f"{tag}_levels_add"))
        else:  # one kernel: int32 products * sw (N,) in the GEMM's epilogue, then * sx (..., 1)
            xq, sx, zx = self.per_token(x, width)
            self.nodes.append(h.make_node("MatMulIntegerToFloat", [xq, wq_name, sx, sw_name, zx, zw_name], [y],
                                          f"{tag}_quant", domain=MS_DOMAIN))
