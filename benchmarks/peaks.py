"""What the CPU and the graph can do, measured beside every benchmark run: GEMM peaks per kernel
(torch and ONNX Runtime, fp32 and int8), the backbone's matmul parameters (prefill FLOPs =
2 · params · tokens) and ORT's op-type profile of one prefill."""

from __future__ import annotations

import gc
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np


def backbone_params(onnx_path: Path, vocab: int) -> int:
    """Weights of the backbone's matmuls: 2-D initializers except the (vocab, H) embedding."""
    import onnx

    m = onnx.load(str(onnx_path), load_external_data=False)
    return sum(int(np.prod(t.dims)) for t in m.graph.initializer if len(t.dims) == 2 and vocab not in t.dims)


def gemm_size(t_quarter: float, n: int, budget_s: float) -> int:
    """The largest of n, n/2 whose GEMM fits ``budget_s`` by the time of one at n/4 (cubic in the
    size), else n/4.

    >>> gemm_size(0.01, 2048, 2.0), gemm_size(0.1, 2048, 2.0), gemm_size(3.0, 2048, 2.0)
    (2048, 1024, 512)
    """
    return next((m for m in (n, n // 2) if t_quarter * (m / (n // 4)) ** 3 <= budget_s), n // 4)


def matmul_peaks(threads: int, n: int = 2048, reps: int = 3, budget_s: float = 2.0) -> dict[str, dict[str, float]]:
    """GFLOP/s of n×n×n GEMMs: torch fp32/bf16/int8 (torch._int_mm) and ORT MatMul / int8 MatMul.

    A kernel the CPU only emulates (torch bf16 without AVX-512 BF16 or AMX runs at ~0.1 GFLOP/s on
    AVX2: one 2048³ GEMM takes minutes) is measured on a smaller square: each kernel is first timed
    once at n/4, and measured at the largest of n, n/2, n/4 whose call that probe says fits
    ``budget_s``. A native kernel is fast enough for n everywhere measured; the size used is
    reported beside each peak ({name: {"gflops", "n"}}), so a peak from a smaller GEMM is visible."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper

    torch.set_num_threads(threads)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1

    def ort_session(nodes: list[Any], size: int, weights: list[Any]) -> Any:
        g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [size, size])], weights)
        return ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString(),
                                    opts, providers=["CPUExecutionProvider"])

    def ort_fp32(size: int) -> Callable[[], Any]:
        w = np.random.randn(size, size).astype(np.float32)
        s = ort_session([helper.make_node("MatMul", ["A", "W"], ["Y"])], size,
                        [helper.make_tensor("W", TensorProto.FLOAT, [size, size], w.ravel())])
        x = np.random.randn(size, size).astype(np.float32)
        return lambda: s.run(None, {"A": x})

    def ort_int8_dynamic(size: int) -> Callable[[], Any]:
        # What quantize_dynamic emits (DynamicQuantizeLinear + MatMulInteger, fused by ORT into
        # DynamicQuantizeMatMul): float activations quantized per call, int8 per-column weights.
        wq = np.random.randint(-127, 127, (size, size)).astype(np.int8)
        s = ort_session(
            [helper.make_node("DynamicQuantizeLinear", ["A"], ["Aq", "As", "Az"]),
             helper.make_node("MatMulInteger", ["Aq", "Wq", "Az", "Wz"], ["Yi"]),
             helper.make_node("Cast", ["Yi"], ["Yf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["As", "Ws"], ["S"]),
             helper.make_node("Mul", ["Yf", "S"], ["Y"])], size,
            [helper.make_tensor("Wq", TensorProto.INT8, [size, size], wq.ravel().tobytes(), raw=True),
             helper.make_tensor("Wz", TensorProto.INT8, [size], np.zeros(size, np.int8).tobytes(), raw=True),
             helper.make_tensor("Ws", TensorProto.FLOAT, [size], np.full(size, 0.01, np.float32))])
        x = np.random.randn(size, size).astype(np.float32)
        return lambda: s.run(None, {"A": x})

    def torch_mm(dtype: Any) -> Callable[[int], Callable[[], Any]]:
        def make(size: int) -> Callable[[], Any]:
            if dtype is torch.int8:
                a, b = (torch.randint(-127, 127, (size, size), dtype=torch.int8) for _ in range(2))
                return lambda: torch._int_mm(a, b)
            a, b = (torch.randn(size, size).to(dtype) for _ in range(2))
            return lambda: a @ b
        return make

    def seconds(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def peak(make: Callable[[int], Callable[[], Any]]) -> dict[str, float]:
        probe = make(n // 4)
        probe()                                                    # first call: allocation, packing
        t_probe = seconds(probe)
        size = gemm_size(t_probe, n, budget_s)
        fn = probe
        if size != n // 4:
            fn = make(size)
            fn()                                                   # its first call, untimed
        best = min(seconds(fn) for _ in range(reps))
        return {"gflops": round(2 * size ** 3 / best / 1e9, 1), "n": size}

    return {"torch_fp32": peak(torch_mm(torch.float32)), "torch_bf16": peak(torch_mm(torch.bfloat16)),
            "torch_int8": peak(torch_mm(torch.int8)), "ort_fp32": peak(ort_fp32),
            "ort_int8_dynamic": peak(ort_int8_dynamic)}


def profile_prefill(export_dir: Path, ids: list[int], threads: int) -> dict[str, Any]:
    """ORT session profiling of one prefill: share of node time per op type (after one warm-up)."""
    import onnxruntime as ort

    from typed_decisions.artifacts import load_artifacts
    from typed_decisions.engine import Backbone

    art = load_artifacts(export_dir, verify=False)
    bb = Backbone(art, threads=threads, providers=["CPUExecutionProvider"])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        opts.profile_file_prefix = str(Path(d) / "prof")
        bb.session = ort.InferenceSession(str(art.onnx_path), opts, providers=["CPUExecutionProvider"])
        bb.run([ids], bb.empty())
        t0 = time.perf_counter()
        bb.run([ids], bb.empty())
        wall = time.perf_counter() - t0
        events = json.loads(Path(bb.session.end_profiling()).read_text())
    per_op: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_op[e["args"]["op_name"]] += e["dur"] / 1e6
            count[e["args"]["op_name"]] += 1
    total = sum(per_op.values()) / 2  # two runs were profiled
    ops = sorted(per_op, key=lambda k: -per_op[k])
    del bb
    gc.collect()
    return {"tokens": len(ids), "second_run_wall_s": round(wall, 4),
            "op_types_by_time": [{"op": k, "share": round(per_op[k] / 2 / total, 4), "nodes": count[k] // 2}
                                 for k in ops[:12]]}
