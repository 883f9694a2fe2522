"""INT8 written by the graph builder straight from the source tensors (issue #32): no float32 export
on disk first, and never the whole float model in memory.

    write_int8_backbone   the builder writes model.int8.onnx, each MatMul weight quantized as it
                          is read (direct_writer.py), every down_proj float32 as quantize_export
                          keeps it, then the u8·u8 twin (u8u8.py) for CPUs without VNNI/AMX;
    (export.py runs the bounded self-check here: the prefix graph against transformers, and the
                          shipped integers against the checked prefix's float weights quantized again)
    judge_direct          the drift probe of quantize_export (drift.py, the same probes, threshold
                          and record), float32 being the builder's float graph run a segment of
                          layers at a time (float_reference.py).

The INT8 graph is the one quantize_export writes from the builder's float32 export: the same
integers, scales and nodes (tested on every tiny family to the bit). What it does not write:
SmoothQuant (`smooth`), which calibrates on the float32 graph's activations; such options take the
float32 export and quantize_export (`direct_refusal` says so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..layout import INT8_ONNX_FILE, INT8_U8U8_ONNX_FILE
from .direct_writer import Int8GraphWriter
from .drift import load_check
from .float_reference import SEGMENT_BYTES, probe_tables, segments
from .matmul_rewrite import MatMulRewrite
from .options import Int8Options
from .pipeline import Int8Plan, _record, graphs_for, judge, probe_set, refusal
from .smoothquant import SMOOTH_TARGET, SmoothingPlan, excluded_nodes
from .u8u8 import write_u8u8_graph


def direct_refusal(options: Int8Options) -> str | None:
    """Why the builder cannot write these INT8 options directly (None: it can)."""
    if options.smooth is not None:
        return ("SmoothQuant (smooth) calibrates its vectors on the float32 graph's activations, so it quantizes "
                "a float32 export (quantize_export)")
    return None


@dataclass
class Int8Written:
    """What write_int8_backbone wrote: the plan quantize_export would have made, and the counts."""

    plan: Int8Plan
    quantized: int  # MatMuls made INT8
    seconds: float
    geometry: dict[str, Any]


def write_int8_backbone(spec: Any, source: Any, out_dir: Path, options: Int8Options, *, opset: int = 18,
                        log=print, progress=None, hidden_layers: Any = "auto") -> Int8Written:
    """model.int8.onnx (+ .data) from the source, and its u8·u8 twin when the format needs one."""
    from ..builder import build_backbone

    reason = direct_refusal(options)
    if reason is not None:
        raise ValueError(reason)
    fmt = options.integer_format
    keep = {layer.down.weight for layer in spec.layers}  # every down_proj stays float32 (options.smooth is None)
    writers: list[Int8GraphWriter] = []

    def make_writer(data_file: Any, location: str) -> Int8GraphWriter:
        writers.append(Int8GraphWriter(data_file, location, fmt, lambda name: name in keep))
        return writers[-1]

    t0 = time.perf_counter()
    out_onnx = Path(out_dir) / INT8_ONNX_FILE
    log(f"builder: INT8 straight from the source: MatMul weights int8 per column as they are read, "
        f"{len(keep)} {SMOOTH_TARGET} MatMuls float32 ...")
    geometry = build_backbone(source, out_onnx, spec=spec, opset=opset, log=log, progress=progress,
                              make_writer=make_writer, hidden_layers=hidden_layers)
    writer = writers[0]
    float_nodes, float_modules = excluded_nodes(out_onnx)
    if len(float_nodes) != len(writer.float_matmuls):  # the builder's scopes name each down_proj as the traced graph does
        raise ValueError(f"{len(writer.float_matmuls)} MatMul weights kept float32 but {len(float_nodes)} "
                         f"{SMOOTH_TARGET} MatMuls found by their scopes")
    graphs = graphs_for(fmt)
    if graphs is not None:
        write_u8u8_graph(out_onnx, Path(out_dir) / graphs["u8u8"])
    plan = Int8Plan(options, SmoothingPlan(None, float_nodes=float_nodes, float_modules=float_modules),
                    MatMulRewrite(fmt), graphs, "per_token", fmt.describe())
    seconds = time.perf_counter() - t0
    log(f"builder: quantized {writer.matmuls_quantized} MatMuls in {seconds:.1f} s")
    return Int8Written(plan, writer.matmuls_quantized, seconds, geometry)


def discard(out_dir: Path) -> None:
    """Remove the INT8 graphs of a refused direct export (the directory has no manifest: unusable)."""
    for name in (INT8_ONNX_FILE, INT8_ONNX_FILE + ".data", INT8_U8U8_ONNX_FILE):
        (Path(out_dir) / name).unlink(missing_ok=True)


def judge_direct(spec: Any, source: Any, out_dir: Path, written: Int8Written, facts: dict[str, Any],
                 arch: dict[str, Any], *, force: bool = False, budget: int = SEGMENT_BYTES, log=print) -> dict[str, Any]:
    """The drift probe of the INT8 graph in `out_dir` against the float32 reference computed from
    the source a segment at a time; returns the manifest's `quantization`, or raises
    QuantizationError (the INT8 files removed) above the threshold unless `force`."""
    out_dir = Path(out_dir)
    _, probe, prompts = probe_set(out_dir, facts, arch)
    parts = segments(spec, budget)
    log(f"float32 reference for the drift probe: the builder's float graph in {len(parts)} segments of layers ...")
    t0 = time.perf_counter()
    reference = probe_tables(spec, source.tensors, probe, prompts, out_dir, budget=budget, log=log)
    reference_seconds = time.perf_counter() - t0
    m, passed = judge(written.plan, probe, prompts, out_dir, reference=reference, log=log)
    if not passed and not force:
        discard(out_dir)
        raise refusal(m, f"{out_dir} has no usable export (no float32 graph was written): export without INT8 "
                         "for float32")
    record = _record(written.plan, written.quantized, m, passed, force, written.seconds, None,
                     load_check(prompts, probe.cands, m["p8"]))
    record["written_by"] = "builder"  # from the source tensors; quantize_export's records have source_onnx_sha256
    record["float_reference"] = {"graph": "the builder's float32 graph, run a segment of layers at a time",
                                 "segments": [list(p) for p in parts], "seconds": round(reference_seconds, 2)}
    return record
