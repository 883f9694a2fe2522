"""A small ONNX graph writer: nodes with unique names, inline constants, and weights appended to
one external-data file as they come (each weight is written and released; the graph proto holds
only its location, offset and length).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from collections.abc import Iterable
from typing import Any, BinaryIO

import numpy as np

_ALIGN = 64  # bytes; weights of 1 MiB and more start on a page (4096) so a reader may map them
_PAGE, _BIG = 4096, 1 << 20


class GraphWriter:
    """Collects nodes and initializers; `weight` streams its array into `data_file`."""

    def __init__(self, data_file: BinaryIO, location: str):
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._data, self._location, self._offset = data_file, location, 0
        self._used: Counter[str] = Counter()
        self._constants: dict[tuple, str] = {}
        self.bytes_written = 0

    def fresh(self, hint: str) -> str:
        """A tensor or node name not used before, derived from `hint`."""
        self._used[hint] += 1
        n = self._used[hint]
        return hint if n == 1 else f"{hint}_{n - 1}"

    def op(self, op_type: str, inputs: list[str], *, out: str | None = None, outputs: int = 1,
           scope: list[str] | None = None, **attrs: Any) -> Any:
        """Append one node; returns its output name (or the list of them when outputs > 1).

        `scope` is written as the node's `pkg.torch.onnx.name_scopes` metadata, the module path the
        dynamo exporter records: the INT8 pipeline finds each layer's down_proj by it
        (int8/smoothquant.py), so builder and traced graphs quantize the same MatMuls.
        """
        from onnx import helper

        names = [out] if out is not None and outputs == 1 else [self.fresh(f"{op_type.lower()}") for _ in range(outputs)]
        node = helper.make_node(op_type, inputs, names, name=self.fresh(f"node_{op_type}"), **attrs)
        if scope is not None:
            entry = node.metadata_props.add()
            entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(scope)
        self.nodes.append(node)
        return names[0] if outputs == 1 else names

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        """A small constant (shapes, axes, scalars) stored in the graph, shared by equal values."""
        from onnx import numpy_helper

        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            name = self.fresh("const")
            self.initializers.append(numpy_helper.from_array(array, name))
            self._constants[key] = name
        return self._constants[key]

    def weight(self, name: str, array: np.ndarray) -> str:
        """Write `array` (float32, C order) to the external-data file now; the graph keeps a reference."""
        array = np.ascontiguousarray(array, dtype=np.float32)
        return self.weight_blocks(name, array.shape, [array])

    def matmul_weight(self, name: str, array: np.ndarray) -> str:
        """A MatMul's constant (in, out) weight: written as float32 here; an INT8 writer
        (int8/direct_writer.py) writes its integers and scales instead."""
        return self.weight(name, array)

    def finish(self, opset: int) -> dict[str, int]:
        """Called once every node is written; returns the graph's opset imports (domain -> version)."""
        return {"": opset}

    def weight_blocks(self, name: str, shape: tuple[int, ...], blocks: Iterable[np.ndarray]) -> str:
        """Write a float32 tensor of `shape` given as consecutive C-order blocks (rows of a 2-D
        tensor, say), each written before the next is asked for: the whole tensor is never held."""
        self.initializers.append(self.external(name, shape, blocks))
        return name

    def external(self, name: str, shape: tuple[int, ...], blocks: Iterable[np.ndarray], dtype: Any = np.float32) -> Any:
        """Append a tensor of `shape` and `dtype` (blocks as weight_blocks takes them) to the data
        file, aligned; returns its TensorProto, which points at those bytes (not yet in the graph)."""
        from onnx import TensorProto, helper

        dtype = np.dtype(dtype)
        nbytes = dtype.itemsize * int(np.prod(shape))
        align = _PAGE if nbytes >= _BIG else _ALIGN
        pad = (-self._offset) % align
        if pad:
            self._data.write(b"\0" * pad)
            self._offset += pad
        written = 0
        for block in blocks:
            block = np.ascontiguousarray(block, dtype=dtype)
            self._data.write(memoryview(block).cast("B"))
            written += block.nbytes
        if written != nbytes:
            raise ValueError(f"{name}: blocks of {written} bytes for a tensor of shape {list(shape)} ({nbytes} bytes)")
        tensor = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(dtype), dims=list(shape),
                             data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self._location), ("offset", str(self._offset)), ("length", str(nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self._offset += nbytes
        self.bytes_written += nbytes
        return tensor


def value_info(name: str, elem_type: int, dims: list[str | int]) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, elem_type, dims)


def save_model(path: Path, writer: GraphWriter, inputs: list[Any], outputs: list[Any], opset: int, doc: str) -> None:
    """Write the graph proto (weights already in the external-data file) to `path`."""
    from onnx import checker, helper

    imports = writer.finish(opset)
    graph = helper.make_graph(writer.nodes, "typed_decisions_backbone", inputs, outputs, writer.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()],
                              producer_name="typed_decisions_export.builder", doc_string=doc)
    model.ir_version = 10
    Path(path).write_bytes(model.SerializeToString())
    checker.check_model(str(path))  # by path: external data is found beside it, not loaded
