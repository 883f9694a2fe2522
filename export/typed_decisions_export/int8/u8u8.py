"""The u8·u8 twin of a per-token INT8 graph (write_u8u8_graph) for CPUs whose u8·s8 kernel
saturates int16 pair sums (no VNNI/AMX): the same integers, read from the same weight file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .integer import default_opset


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
