"""External-data weights, one at a time: read a float32 initializer's own bytes (read_weight),
rescale it on the way (scale_weight: how SmoothQuant's vectors are folded in), and append tensors
page-aligned to a new data file (DataWriter). The INT8 writer (matmul_rewrite.py) holds about one
weight matrix in memory at a time through these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

_ALIGN = 4096  # page-aligned offsets let ONNX Runtime memory-map the external data
_COPY_CHUNK = 64 << 20


def external_entry(tensor: Any) -> dict[str, str] | None:
    if tensor.data_location != 1:  # onnx.TensorProto.EXTERNAL
        return None
    return {e.key: e.value for e in tensor.external_data}


def read_weight(tensor: Any, base: Path) -> np.ndarray:
    """One float32 initializer as an array, reading only its own bytes of the external data file."""
    from onnx import numpy_helper

    ext = external_entry(tensor)
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



class DataWriter:
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
        ext = external_entry(tensor)
        length, offset = int(ext["length"]), int(ext.get("offset", 0))
        self._place(tensor, length)
        with open(base / ext["location"], "rb") as src:
            src.seek(offset)
            left = length
            while left:
                block = src.read(min(left, _COPY_CHUNK))
                self.f.write(block)
                left -= len(block)
