"""Streaming per-channel INT8 for the constant-weight MatMuls of an ONNX graph with external data.

Why not `onnxruntime.quantization.quantize_dynamic`: it loads every external weight into memory,
copies the model for shape inference and keeps float and int8 copies side by side; on the 6 GB
float32 Qwen2.5-1.5B backbone it passed 17 GB of RSS and was killed on a 24 GB machine. This
module produces the same graph pattern that quantize_dynamic emits for MatMul in IntegerOps mode,

    X -> DynamicQuantizeLinear -> (Xq uint8, sx, zx)          one per activation, shared
    MatMulInteger(Xq, Wq int8 (K, N), zx, zw = 0 (N,)) -> Cast(float) -> Mul(sx * sw (N,)) -> Y

with symmetric int8 weights per output column (`sw = max|W[:, n]| / 127`, `Wq = rint(W / sw)`),
while reading one weight at a time and streaming every initializer into the new data file, so the
peak memory is about one weight matrix. ONNX Runtime fuses the pattern into its
MatMulIntegerToFloat kernel at session load, as it does for quantize_dynamic's output.

Optionally, named weights are rescaled per row or per column while they stream through (before
quantization, or as float32 when the weight is not quantized): this is how SmoothQuant's
smoothing vectors are folded into the graph (quantize.py), one weight in memory at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

_ALIGN = 4096  # page-aligned offsets let ONNX Runtime memory-map the external data
_COPY_CHUNK = 64 << 20


def _external(tensor: Any) -> dict[str, str] | None:
    if tensor.data_location != 1:  # onnx.TensorProto.EXTERNAL
        return None
    return {e.key: e.value for e in tensor.external_data}


def _read_weight(tensor: Any, base: Path) -> np.ndarray:
    """One float32 initializer as an array, reading only its own bytes of the external data file."""
    from onnx import numpy_helper

    ext = _external(tensor)
    if ext is None:
        return numpy_helper.to_array(tensor)
    count = int(np.prod(tensor.dims))
    data = np.fromfile(base / ext["location"], dtype=np.float32, count=count, offset=int(ext.get("offset", 0)))
    return data.reshape(tuple(tensor.dims))


def scale_weight(w: np.ndarray, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> np.ndarray:
    """`W[k, n] * rows[k] * cols[n]` for a (K, N) weight, computed in float64, returned float32.

    >>> scale_weight(np.ones((2, 3), np.float32), rows=np.array([1.0, 2.0]), cols=np.array([1.0, 0.5, 4.0])).tolist()
    [[1.0, 0.5, 4.0], [2.0, 1.0, 8.0]]
    """
    out = w.astype(np.float64)
    if rows is not None:
        if rows.shape != (w.shape[0],):
            raise ValueError(f"row scale of shape {rows.shape} for a weight of shape {w.shape}")
        out *= np.asarray(rows, np.float64)[:, None]
    if cols is not None:
        if cols.shape != (w.shape[1],):
            raise ValueError(f"column scale of shape {cols.shape} for a weight of shape {w.shape}")
        out *= np.asarray(cols, np.float64)[None, :]
    return out.astype(np.float32)


def quantize_weight_per_column(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output column of a (K, N) weight: (Wq int8 (K, N), scale float32 (N,)).

    >>> q, s = quantize_weight_per_column(np.array([[1.0, -0.5], [-2.0, 0.25]], np.float32))
    >>> q.tolist(), [round(float(x), 5) for x in s]
    ([[64, -127], [-127, 64]], [0.01575, 0.00394])
    """
    absmax = np.abs(w).max(axis=0)  # (N,)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)  # (N,)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)  # (K, N)
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


def quantize_matmuls(
    src: Path,
    dst: Path,
    *,
    exclude: set[str],
    scale_rows: dict[str, np.ndarray] | None = None,
    scale_cols: dict[str, np.ndarray] | None = None,
    per_row: set[str] = frozenset(),
    log=print,
) -> int:
    """Write `dst` (+ `dst.data`): `src` with every constant-weight 2-D MatMul not in `exclude`
    (node names) turned into dynamic INT8. Returns the number of MatMuls quantized.

    `scale_rows` / `scale_cols` (initializer name -> vector) rescale 2-D float weights while they
    are streamed, `W[k, :] *= scale_rows[name][k]` and `W[:, n] *= scale_cols[name][n]` (ONNX
    MatMul weights are (K, N) = (in, out)), before quantizing them or, for a weight that stays
    float32 (`exclude`d, or not a MatMul weight), in its float32 copy.

    MatMuls named in `per_row` get their activation quantized per row (per token) instead of per
    tensor: symmetric, `sx = max_k |X[..., k]| / 127` (shape (..., 1)), stored as uint8 with zero
    point 128 so that ONNX Runtime's u8s8 integer kernel runs it,

        Xq = Cast<uint8>(Round(X / sx) + 128) -> MatMulInteger(Xq, Wq, 128, 0) -> Cast -> Mul(sw) -> Mul(sx)

    (not fused into MatMulIntegerToFloat, whose activation scale is per tensor)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(src), load_external_data=False)
    graph, base = model.graph, src.parent
    inits = {t.name: t for t in graph.initializer}
    scale_rows, scale_cols = dict(scale_rows or {}), dict(scale_cols or {})
    for name in set(scale_rows) | set(scale_cols):
        t = inits.get(name)
        if t is None or t.data_type != TensorProto.FLOAT or len(t.dims) != 2:
            raise ValueError(f"cannot rescale {name!r}: not a 2-D float32 initializer of {src.name}")

    def read(name: str) -> np.ndarray:  # (K, N) float32, rescaled when asked
        w = _read_weight(inits[name], base)
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

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)
    data_name = dst.name + ".data"
    nodes, new_inits, dropped, activations, count = [], [], set(), {}, 0

    def row_quantized(x: str) -> tuple[str, str, str]:  # per-row symmetric, uint8 around 128
        names = (f"{x}_row_quantized", f"{x}_row_scale", "per_row_zero_point_128")
        if (x, "row") in activations:
            return activations[(x, "row")]
        if not any(t.name == names[2] for t in new_inits):
            new_inits.append(helper.make_tensor(names[2], TensorProto.UINT8, [], [128]))
            new_inits.append(helper.make_tensor("per_row_inv_127", TensorProto.FLOAT, [], [1.0 / 127.0]))
            new_inits.append(helper.make_tensor("per_row_tiny", TensorProto.FLOAT, [], [1e-30]))
            new_inits.append(helper.make_tensor("per_row_128", TensorProto.FLOAT, [], [128.0]))
            new_inits.append(helper.make_tensor("per_row_axes", TensorProto.INT64, [1], [-1]))
        t = f"{x}_row"
        reduce = (helper.make_node("ReduceMax", [f"{t}_abs", "per_row_axes"], [f"{t}_absmax"], f"{t}_reducemax", keepdims=1)
                  if opset >= 18 else
                  helper.make_node("ReduceMax", [f"{t}_abs"], [f"{t}_absmax"], f"{t}_reducemax", axes=[-1], keepdims=1))
        nodes.extend([
            helper.make_node("Abs", [x], [f"{t}_abs"], f"{t}_abs"),
            reduce,
            helper.make_node("Max", [f"{t}_absmax", "per_row_tiny"], [f"{t}_absmax_pos"], f"{t}_max"),
            helper.make_node("Mul", [f"{t}_absmax_pos", "per_row_inv_127"], [names[1]], f"{t}_scale"),  # (..., 1)
            helper.make_node("Div", [x, names[1]], [f"{t}_scaled"], f"{t}_div"),
            helper.make_node("Round", [f"{t}_scaled"], [f"{t}_rounded"], f"{t}_round"),  # in [-127, 127]
            helper.make_node("Add", [f"{t}_rounded", "per_row_128"], [f"{t}_shifted"], f"{t}_shift"),
            helper.make_node("Cast", [f"{t}_shifted"], [names[0]], f"{t}_cast", to=TensorProto.UINT8),
        ])
        activations[(x, "row")] = names
        return names

    with open(dst.parent / data_name, "wb") as f:
        writer = _DataWriter(f, data_name)
        for node in graph.node:
            if not quantizable(node):
                nodes.append(node)
                continue
            x, w_name, y = node.input[0], node.input[1], node.output[0]
            wq, scale = quantize_weight_per_column(read(w_name))  # (K, N), (N,)
            tag = node.name or y
            if node.name in per_row:
                xq, sx, zx = row_quantized(x)
            else:
                if x not in activations:  # q/k/v (and gate/up) share their input: quantize it once
                    activations[x] = (f"{x}_quantized", f"{x}_scale", f"{x}_zero_point")
                    nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(activations[x]), f"{x}_QuantizeLinear"))
                xq, sx, zx = activations[x]
            wq_t = TensorProto(name=f"{w_name}_quantized", data_type=TensorProto.INT8, dims=wq.shape)
            writer.add_array(wq_t, wq)  # (K, N), straight to the data file
            zw_t = helper.make_tensor(f"{w_name}_zero_point", TensorProto.INT8, [wq.shape[1]], np.zeros(wq.shape[1], np.int8).tobytes(), raw=True)
            sw_t = helper.make_tensor(f"{w_name}_scale", TensorProto.FLOAT, [wq.shape[1]], scale.tobytes(), raw=True)
            new_inits += [wq_t, zw_t, sw_t]
            nodes += [
                helper.make_node("MatMulInteger", [xq, wq_t.name, zx, zw_t.name], [f"{tag}_int32"], f"{tag}_quant"),
                helper.make_node("Cast", [f"{tag}_int32"], [f"{tag}_float"], f"{tag}_cast", to=TensorProto.FLOAT),
            ]
            if node.name in per_row:  # sx is (..., 1): column scales first, then the row scales
                nodes += [
                    helper.make_node("Mul", [f"{tag}_float", sw_t.name], [f"{tag}_colscaled"], f"{tag}_rescale_cols"),
                    helper.make_node("Mul", [f"{tag}_colscaled", sx], [y], f"{tag}_rescale"),
                ]
            else:
                nodes += [
                    helper.make_node("Mul", [sx, sw_t.name], [f"{tag}_scales"], f"{tag}_scales_mul"),
                    helper.make_node("Mul", [f"{tag}_float", f"{tag}_scales"], [y], f"{tag}_rescale"),
                ]
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
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    onnx.save(model, str(dst))
    return count
