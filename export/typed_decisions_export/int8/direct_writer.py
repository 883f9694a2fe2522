"""The graph builder's INT8 writer: each MatMul weight quantized as it streams from the source
(Int8GraphWriter), so an INT8 export needs no float32 export on disk first (issue #32).

It is the builder's GraphWriter (builder/graph.py) with two steps changed:

- `matmul_weight(name, W)`: a (K, N) weight the plan quantizes is written as `name`_quantized int8
  with its per-column scale and zero point (matmul_rewrite.quantized_weight, the function the
  file-to-file rewrite uses, so both write the same integers); the others (every down_proj, kept
  float32 as rewrite_matmuls keeps them) are written as float32;
- `finish(opset)`: every MatMul reading a quantized weight becomes the per-token nodes of
  QuantizedGraph (quantized_graph.py), in place, exactly as rewrite_matmuls writes them, and the
  graph imports opset 21 (one blocked QuantizeLinear per activation) and ONNX Runtime's
  com.microsoft domain (MatMulIntegerToFloat).

What it does not write: SmoothQuant (smoothing folds vectors calibrated on the float32 graph's
activations into the weights) and the study variants. Those take the float32 export and
int8/pipeline.py's quantize_export.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

from ..builder.graph import GraphWriter
from .integer import IntegerFormat
from .matmul_rewrite import MatMulRewrite, quantized_weight
from .quantized_graph import BLOCKED_QUANTIZE_OPSET, MS_DOMAIN


class Int8GraphWriter(GraphWriter):
    """A GraphWriter that quantizes the MatMul weights `keep_float(name)` does not keep float32."""

    def __init__(self, data_file: BinaryIO, location: str, fmt: IntegerFormat, keep_float: Callable[[str], bool]):
        super().__init__(data_file, location)
        self.rewrite = MatMulRewrite(fmt)
        self.keep_float = keep_float
        self.quantized: dict[str, tuple[str, str, str, int]] = {}  # float name -> (wq, sw, zw, K)
        self.float_matmuls: list[str] = []  # MatMul weights kept float32

    def _add_array(self, tensor: Any, array: np.ndarray) -> None:
        """Append an int8 array to the data file (aligned, as the floats), pointing `tensor` at it."""
        tensor.CopyFrom(self.external(tensor.name, array.shape, [array], dtype=array.dtype))

    def matmul_weight(self, name: str, array: np.ndarray) -> str:
        if self.keep_float(name):
            self.float_matmuls.append(name)
            return self.weight(name, array)
        wq, sw, zw = quantized_weight(name, array, self.rewrite.weight_levels, self._add_array)
        self.initializers += [wq, zw, sw]
        self.quantized[name] = (wq.name, sw.name, zw.name, int(wq.dims[0]))
        return name  # the MatMul reads this name until finish() rewrites it

    def finish(self, opset: int) -> dict[str, int]:
        """Rewrite the MatMuls that read a quantized weight; returns the INT8 graph's opset imports."""
        if opset < 18:
            raise ValueError(f"opset {opset}: the INT8 graph raises the builder's opset (>= 18) to {BLOCKED_QUANTIZE_OPSET}")
        out = self.rewrite.graph(BLOCKED_QUANTIZE_OPSET)
        count = 0
        for node in self.nodes:
            target = self.quantized.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
            if target is None:
                out.nodes.append(node)
                continue
            wq, sw, zw, width = target
            self.rewrite.matmul(out, node, wq, sw, zw, width, None)
            count += 1
        if count != len(self.quantized):
            raise ValueError(f"{len(self.quantized)} weights quantized but {count} MatMuls read them")
        self.nodes = out.nodes
        self.initializers += out.inits
        self.matmuls_quantized = count
        return {"": BLOCKED_QUANTIZE_OPSET, MS_DOMAIN: 1}
