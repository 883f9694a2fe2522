"""Which integer formats ONNX Runtime's CPU MatMulInteger computes exactly here, and how fast.

On x86 CPUs without VNNI (AVX2 only), MLAS's u8·s8 kernel multiplies with VPMADDUBSW, which adds
each pair of u8·s8 products into a *saturating* int16; a pair sum above 32,767 is clipped and the
result is silently wrong. VNNI (VPDPBUSD) and AMX accumulate in int32 and are exact. So whether a
quantized graph computes what it says depends on the CPU it runs on, unless its integers stay in a
range where no pair can saturate:

    |a0·b0 + a1·b1| <= 2 · max(a) · max|b| <= 32,767

This script checks each candidate format against an exact int64 numpy matmul, on "worst case"
operands (every value at its extreme) and on realistic ones (Gaussian activations with outlier
channels, per-column int8 weights), and times each against a float32 MatMul of the same shape in
the same process. It prints the CPU's ISA flags beside the numbers.

    python -m benchmarks.studies.int8_kernels [--m 256] [--k 1536] [--n 8960] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from typed_decisions.cpu import describe

# name -> (A dtype, A zero point, A half-range, B dtype, B zero point, B half-range)
FORMATS = {
    "u8s8 (a 8-bit, w 8-bit)": (np.uint8, 128, 127, np.int8, 0, 127),
    "u8s8 (a 7-bit, w 8-bit)": (np.uint8, 64, 63, np.int8, 0, 127),
    "u8s8 (a 8-bit, w 7-bit)": (np.uint8, 128, 127, np.int8, 0, 63),
    "u8u8 (a 8-bit, w 8-bit)": (np.uint8, 128, 127, np.uint8, 128, 127),
    "s8s8 (a 8-bit, w 8-bit)": (np.int8, 0, 127, np.int8, 0, 127),
}
_ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def session(a_type, b: np.ndarray, b_zp: int, a_zp: int, threads: int) -> ort.InferenceSession:
    """MatMulInteger(A, B const, a_zp, b_zp) -> int32."""
    k, n = b.shape
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "a_zp", "b_zp"], ["Y"])],
        "mmi",
        [helper.make_tensor_value_info("A", _ONNX_TYPE[a_type], ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, ["M", n])],
        initializer=[
            helper.make_tensor("B", _ONNX_TYPE[b.dtype.type], b.shape, b.tobytes(), raw=True),
            helper.make_tensor("a_zp", _ONNX_TYPE[a_type], [], [a_zp]),
            helper.make_tensor("b_zp", _ONNX_TYPE[b.dtype.type], [], [b_zp]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def float_session(w: np.ndarray, threads: int) -> ort.InferenceSession:
    k, n = w.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "mm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.tobytes(), raw=True)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def operands(fmt, m: int, k: int, n: int, worst: bool, rng: np.random.Generator):
    """(A stored, B stored, A centred int64, B centred int64) for one format."""
    a_type, a_zp, a_half, b_type, b_zp, b_half = fmt
    if worst:  # every value at an extreme of its range, signs aligned pairwise
        a_c = np.full((m, k), a_half, np.int64)
        b_c = np.full((k, n), b_half, np.int64)
    else:  # per-row symmetric quantization of Gaussian activations with outlier channels
        x = rng.standard_normal((m, k))
        x[:, rng.choice(k, 8, replace=False)] *= 40.0
        a_c = np.rint(x / np.abs(x).max(1, keepdims=True) * a_half).astype(np.int64)
        w = rng.standard_normal((k, n))
        b_c = np.rint(w / np.abs(w).max(0, keepdims=True) * b_half).astype(np.int64)
    a = (a_c + a_zp).astype(a_type)
    b = (b_c + b_zp).astype(b_type)
    return a, b, a_c, b_c


def timed(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=256, help="rows (tokens)")
    ap.add_argument("--k", type=int, default=1536, help="inner dimension")
    ap.add_argument("--n", type=int, default=8960, help="output columns")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, help="write the results here (a schema-1 result file)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    m, k, n = args.m, args.k, args.n
    flops = 2.0 * m * k * n
    w = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    fs = float_session(w, args.threads)
    t_fp32 = timed(lambda: fs.run(None, {"X": x}), args.repeat)
    cpu = describe()
    result = {"cpu": cpu, "onnxruntime": ort.__version__, "shape": [m, k, n],
              "threads": args.threads, "float32": {"seconds": t_fp32, "gflops": flops / t_fp32 / 1e9}, "formats": {}}
    print(f"CPU: {cpu['model']}  class {cpu['class']} ({' '.join(cpu['flags'])})  onnxruntime {ort.__version__}")
    print(f"shape M={m} K={k} N={n}, {args.threads} threads")
    print(f"{'float32 MatMul':28s} {'':>22s} {flops / t_fp32 / 1e9:7.1f} GFLOP/s")
    for name, fmt in FORMATS.items():
        row = {}
        for case in ("worst", "realistic"):
            a, b, a_c, b_c = operands(fmt, min(m, 64) if case == "worst" else m, k, n, case == "worst", rng)
            sess = session(fmt[0], b, fmt[4], fmt[1], args.threads)
            got = sess.run(None, {"A": a})[0].astype(np.int64)
            exact = a_c @ b_c
            row[case] = {"max_abs_error": int(np.abs(got - exact).max()),
                         "wrong_fraction": float(np.mean(got != exact))}
        a, b, _, _ = operands(fmt, m, k, n, False, rng)
        sess = session(fmt[0], b, fmt[4], fmt[1], args.threads)
        t = timed(lambda: sess.run(None, {"A": a}), args.repeat)
        row["seconds"], row["gops"], row["vs_float32"] = t, flops / t / 1e9, t_fp32 / t
        result["formats"][name] = row
        exact_txt = "exact" if row["worst"]["max_abs_error"] == 0 and row["realistic"]["max_abs_error"] == 0 else (
            f"WRONG (worst {row['worst']['max_abs_error']}, realistic {row['realistic']['max_abs_error']})")
        print(f"{name:28s} {exact_txt:>22s} {row['gops']:7.1f} GOP/s  {row['vs_float32']:.2f}x float32")
    if args.json:
        from benchmarks import harness

        harness.write_result("int8_kernels", None, result, out=args.json,
                             command=harness.command("benchmarks.studies.int8_kernels", argv))
    return result


if __name__ == "__main__":
    main()
