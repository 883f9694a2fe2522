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


def quantize_matmuls(src: Path, dst: Path, *, exclude: set[str], log=print) -> int:
    """Write `dst` (+ `dst.data`): `src` with every constant-weight 2-D MatMul not in `exclude`
    (node names) turned into dynamic INT8. Returns the number of MatMuls quantized."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(src), load_external_data=False)
    graph, base = model.graph, src.parent
    inits = {t.name: t for t in graph.initializer}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1

    def quantizable(node: Any) -> bool:
        w = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        return w is not None and node.name not in exclude and w.data_type == TensorProto.FLOAT and len(w.dims) == 2

    data_name = dst.name + ".data"
    nodes, new_inits, dropped, activations, count = [], [], set(), {}, 0
    with open(dst.parent / data_name, "wb") as f:
        writer = _DataWriter(f, data_name)
        for node in graph.node:
            if not quantizable(node):
                nodes.append(node)
                continue
            x, w_name, y = node.input[0], node.input[1], node.output[0]
            wq, scale = quantize_weight_per_column(_read_weight(inits[w_name], base))  # (K, N), (N,)
            tag = node.name or y
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
            if _external(t) is not None:
                writer.copy_external(t, base)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    onnx.save(model, str(dst))
    return count
