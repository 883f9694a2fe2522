"""Streaming per-channel INT8 for the constant-weight MatMuls of an ONNX graph with external data
(quantize_matmuls): the opset decision, then every MatMul through QuantizedGraph (quantized_graph.py)
while its weight streams from the old data file to the new one (external_data.py).

Why not `onnxruntime.quantization.quantize_dynamic` itself: it loads every external weight into
memory, copies the model for shape inference and keeps float and int8 copies side by side; on the
6 GB float32 Qwen2.5-1.5B backbone it passed 17 GB of RSS and was killed on a 24 GB machine. This
module reads one weight at a time and streams every initializer into the new data file, so the
peak memory is about one weight matrix.

Optionally, named weights are rescaled per row or per column while they stream through (before
quantization, or as float32 when the weight is not quantized): this is how SmoothQuant's
smoothing vectors are folded into the graph (smoothquant.py), one weight in memory at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .external_data import DataWriter, external_entry, read_weight, scale_weight
from .integer import TOKEN_FORMAT, IntegerFormat, default_opset, quantize_weight_per_column
from .quantized_graph import BLOCKED_QUANTIZE_OPSET, MS_DOMAIN, QuantizedGraph

BLOCKED_QUANTIZE_IR_VERSION = 10  # the IR version of opset 21

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


class MatMulRewrite:
    """How each quantized MatMul is written: per-token activations in `fmt` (IntegerFormat: exact on
    every x86 CPU class), so a token's result depends on its own inputs only, never on the other
    rows of the run or on how a prompt was split into cached steps; `two_level` inputs (activation
    tensor names) as two per-token levels (`QuantizedGraph.two_levels`, ~15 bits), each MatMul
    reading them running two integer GEMMs.

    Per-token integers come from one blocked QuantizeLinear, the graph's opset raised to 21 when
    that changes no node's meaning (from 18-20; `_can_raise_to_blocked_opset`); otherwise the
    source opset is kept and Div, Round, Add, Cast are written (the same integers, four passes over
    each activation). The methods are the steps rewrite_matmuls asks about; the study variants
    (export/studies/int8_variants.py) override them."""

    contrib_ops = True  # the graph gets ONNX Runtime's com.microsoft opset (MatMulIntegerToFloat)

    def __init__(self, fmt: IntegerFormat = TOKEN_FORMAT, two_level: set[str] | frozenset[str] | None = None):
        self.fmt, self.two_level = fmt, set(two_level or ())

    @property
    def weight_levels(self) -> int:
        return self.fmt.weight_levels

    def opset(self, model: Any) -> int:
        """The default-domain opset of the rewritten graph, raised in `model` to 21 where it can be."""
        opset = default_opset(model, 18)
        if _can_raise_to_blocked_opset(model, opset):
            opset = BLOCKED_QUANTIZE_OPSET
            for o in model.opset_import:
                if o.domain in ("", "ai.onnx"):
                    o.version = opset
            model.ir_version = max(model.ir_version, BLOCKED_QUANTIZE_IR_VERSION)
        return opset

    def graph(self, opset: int) -> QuantizedGraph:
        out = QuantizedGraph(opset, self.fmt)
        out.two_level = set(self.two_level)
        return out

    def weight(self, node: Any, w: np.ndarray, writer: DataWriter, out: QuantizedGraph) -> tuple[np.ndarray, str | None]:
        """The (K, N) weight to quantize for `node`, and the name of a float32 part written beside it
        (none here)."""
        return w, None

    def matmul(self, out: QuantizedGraph, node: Any, wq_name: str, sw_name: str, zw_name: str, width: int,
               float_part: str | None) -> None:
        out.matmul(node, wq_name, sw_name, zw_name, width)


def quantized_weight(name: str, w: np.ndarray, levels: int,
                     add_array: Callable[[Any, np.ndarray], None]) -> tuple[Any, Any, Any]:
    """The initializers of one quantized (K, N) weight: (`name`_quantized int8 (K, N), written to the
    data file by `add_array(tensor, array)`; `name`_scale float32 (N,); `name`_zero_point int8 (N,)
    zeros), from quantize_weight_per_column. rewrite_matmuls and the builder's INT8 writer
    (direct_writer.py) both make them here, so both write the same integers."""
    from onnx import TensorProto, helper

    wq, scale = quantize_weight_per_column(w, levels)  # (K, N), (N,)
    wq_t = TensorProto(name=f"{name}_quantized", data_type=TensorProto.INT8, dims=wq.shape)
    add_array(wq_t, wq)  # (K, N), straight to the data file
    n = wq.shape[1]
    zw_t = helper.make_tensor(f"{name}_zero_point", TensorProto.INT8, [n], np.zeros(n, np.int8).tobytes(), raw=True)
    sw_t = helper.make_tensor(f"{name}_scale", TensorProto.FLOAT, [n], scale.tobytes(), raw=True)
    return wq_t, sw_t, zw_t


def quantize_matmuls(
    src: Path,
    dst: Path,
    *,
    exclude: set[str],
    scale_rows: dict[str, np.ndarray] | None = None,
    scale_cols: dict[str, np.ndarray] | None = None,
    fmt: IntegerFormat = TOKEN_FORMAT,
    two_level: set[str] | frozenset[str] | None = None,
    log=print,
) -> int:
    """Write `dst` (+ `dst.data`): `src` with every constant-weight 2-D MatMul not in `exclude`
    (node names) turned into dynamic INT8 with per-token activations in `fmt` (MatMulRewrite).
    Returns the number of MatMuls quantized.

    `scale_rows` / `scale_cols` (initializer name -> vector) rescale 2-D float weights while they
    are streamed, `W[k, :] *= scale_rows[name][k]` and `W[:, n] *= scale_cols[name][n]` (ONNX
    MatMul weights are (K, N) = (in, out)), before quantizing them or, for a weight that stays
    float32 (`exclude`d, or not a MatMul weight), in its float32 copy.

    `two_level` (activation tensor names): those inputs are quantized as two per-token levels
    (`QuantizedGraph.two_levels`, ~15 bits), each MatMul reading them running two integer GEMMs."""
    return rewrite_matmuls(src, dst, MatMulRewrite(fmt, two_level), exclude=exclude, scale_rows=scale_rows,
                           scale_cols=scale_cols, log=log)


def rewrite_matmuls(
    src: Path,
    dst: Path,
    rewrite: MatMulRewrite,
    *,
    exclude: set[str],
    scale_rows: dict[str, np.ndarray] | None = None,
    scale_cols: dict[str, np.ndarray] | None = None,
    log=print,
) -> int:
    """quantize_matmuls with the MatMuls written as `rewrite` says: the graph is loaded without its
    weights, each quantizable MatMul's weight is read, quantized per column and appended to the new
    data file, every other initializer copied (rescaled when asked), one weight in memory at a time."""
    import onnx
    from onnx import TensorProto, helper

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

    out = rewrite.graph(rewrite.opset(model))
    data_name = dst.name + ".data"
    dropped, count = set(), 0
    with open(dst.parent / data_name, "wb") as f:
        writer = DataWriter(f, data_name)
        for node in graph.node:
            if not quantizable(node):
                out.nodes.append(node)
                continue
            w_name = node.input[1]
            w, float_part = rewrite.weight(node, read(w_name), writer, out)  # (K, N)
            wq_t, sw_t, zw_t = quantized_weight(w_name, w, rewrite.weight_levels, writer.add_array)
            del w
            out.inits += [wq_t, zw_t, sw_t]
            rewrite.matmul(out, node, wq_t.name, sw_t.name, zw_t.name, int(wq_t.dims[0]), float_part)
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
            elif external_entry(t) is not None:
                writer.copy_external(t, base)
    del graph.node[:]
    graph.node.extend(out.nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + out.inits)
    if rewrite.contrib_ops and count and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    onnx.save(model, str(dst))
    return count
