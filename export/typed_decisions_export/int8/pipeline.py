"""INT8: dynamic quantization of a checked float32 export, refused when it moves the answers.

Method (matmul_rewrite.py, written one weight at a time because ONNX Runtime's `quantize_dynamic`
needs ~3x the float32 model in RAM): every MatMul with a constant weight, weights symmetric per
output column with 8 bits (int8 in [-127, 127]), activations quantized at run time with one
symmetric scale per token (row), so a row's result never depends on the other rows of a run or
on where a prompt was split into cached steps. CPUs with VNNI/AMX run the u8·s8 graph
(`model.int8.onnx`); every other CPU the u8·u8 graph of the same weights (`model.int8.u8u8.onnx`,
write_u8u8_graph), because their u8·s8 kernel saturates int16 pair sums with 8-bit weights. Both
compute the same integers (`Int8Options(weight_bits=7)`: one u8·s8 graph exact everywhere, more
drift).

quantize_export decides everything first (decide -> Int8Plan: the down_proj policy and SmoothQuant,
smoothquant.py; the integer format, integer.py; which graphs), then writes the graph
(matmul_rewrite.py, and its twin, u8u8.py), measures the drift (drift.py), and installs the
manifest or refuses.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from typed_decisions.cpu import describe as cpu_describe
from typed_decisions.quantized import EXACT_CLASSES, graph_file

from ..errors import ExportError, QuantizationError
from ..layout import INT8_ONNX_FILE, INT8_U8U8_ONNX_FILE, make_logger, prepare_out_dir
from ..manifest import LM_HEAD_FILE, MANIFEST_FILE, file_hashes, read_manifest, write_manifest
from ..softmax_guard import drop_softmax_nan_guards_in_file
from ..tokenizer_files import CHAT_TEMPLATE_FILE, TOKENIZER_FILE, candidate_ids, encode_prompt, render_chat
from .drift import (CANDIDATE_TEXTS, DECISIVE_MARGIN, PROBE_SYSTEM, PROBES, THRESHOLD, Probe, load_check, measure,
                    probe_tokenizer)
from .integer import default_opset
from .matmul_rewrite import MatMulRewrite, rewrite_matmuls
from .options import Int8Options
from .smoothquant import CALIBRATION, CALIBRATION_SYSTEM, SMOOTH_TARGET, SmoothingPlan, excluded_nodes, plan_smoothing
from .u8u8 import write_u8u8_graph


@dataclass(frozen=True)
class Int8Plan:
    """Everything quantize_export decides before it writes a byte of the INT8 graph (decide)."""

    options: Int8Options
    smoothing: SmoothingPlan  # what is folded into the weights and which MatMuls stay float32
    rewrite: MatMulRewrite  # how each MatMul is written: integer format, inputs quantized as two levels
    graphs: dict[str, str] | None  # CPU kernel path -> graph file (u8s8 and its u8u8 twin); None: one graph
    activations: str  # the manifest's `activations` ("per_token"; the studies write "per_tensor")
    integer_format: dict[str, Any]  # the manifest's `integer_format`


def plan_down_proj(src_onnx: Path, options: Int8Options, tok: Any, facts: dict[str, Any], log) -> SmoothingPlan:
    """Without smoothing every down_proj stays float32; with it, calibrate and plan the folding."""
    if options.smooth is None:
        return SmoothingPlan(None, float_nodes=(ex := excluded_nodes(src_onnx))[0], float_modules=ex[1])
    t0 = time.perf_counter()
    calib = [encode_prompt(tok, render_chat(tok, q, CALIBRATION_SYSTEM), facts["add_bos_token"]) for q in CALIBRATION]
    log(f"SmoothQuant (alpha {options.smooth}): {SMOOTH_TARGET} input maxima on {len(calib)} calibration prompts ...")
    plan = plan_smoothing(src_onnx, options.smooth, calib, options.keep_float, log=log, norms=options.smooth_norms)
    plan.record["seconds"] = round(time.perf_counter() - t0, 2)  # calibration included
    log(f"smoothed {len(plan.record['smoothed'])} {SMOOTH_TARGET} inputs")
    return plan


def decide(src_onnx: Path, options: Int8Options, tok: Any, facts: dict[str, Any], log) -> Int8Plan:
    """The plan: smoothing (or down_proj float32), the integer format, the inputs quantized as two
    levels, and whether the u8·u8 twin is written (8-bit weights: u8·s8 saturates without VNNI/AMX)."""
    smoothing, fmt = plan_down_proj(src_onnx, options, tok, facts, log), options.integer_format
    two_level = frozenset(smoothing.smoothed_inputs) if options.down_levels == 2 else frozenset()
    return Int8Plan(options, smoothing, MatMulRewrite(fmt, two_level), graphs_for(fmt), "per_token", fmt.describe())


def graphs_for(fmt: Any) -> dict[str, str] | None:
    """The manifest's `graphs` for an IntegerFormat: the u8·s8 graph and its u8·u8 twin, or None
    (one graph exact on every CPU)."""
    return None if fmt.exact_without_vnni else {"u8s8": INT8_ONNX_FILE, "u8u8": INT8_U8U8_ONNX_FILE}


def probe_set(export_dir: Path, facts: dict[str, Any], arch: dict[str, Any]) -> tuple[Any, Probe, list[list[int]]]:
    """(tokenizer, drift Probe, probe prompts' token ids) from an export directory's tokenizer files
    and lm_head.npy (what the runtime has)."""
    tok = probe_tokenizer(export_dir, facts)
    lm_head = np.load(export_dir / LM_HEAD_FILE, mmap_mode="r")  # (V, H)
    cands = candidate_ids(tok, CANDIDATE_TEXTS, fallback_vocab=lm_head.shape[0])
    prompts = [encode_prompt(tok, render_chat(tok, q, PROBE_SYSTEM), facts["add_bos_token"]) for q in PROBES]
    pad_id = facts["pad_token_id"] if facts["pad_token_id"] is not None else 0
    return tok, Probe(lm_head, cands, arch, pad_id), prompts


def judge(plan: Int8Plan, probe: Probe, prompts: list[list[int]], out_dir: Path, *, src_onnx: Path | None = None,
          reference: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, log=print) -> tuple[dict[str, Any], bool]:
    """Measure the written INT8 graph(s) in `out_dir` against float32 (`src_onnx`, or the `reference`
    tables: float_reference.py) on the probes; returns (drift.measure's result, whether it passes THRESHOLD)."""
    graphs, cpu = plan.graphs, cpu_describe()["class"]
    here = out_dir / (graph_file({"graphs": graphs}, cpu) or INT8_ONNX_FILE)  # the graph this CPU runs
    other = out_dir / INT8_U8U8_ONNX_FILE if graphs and cpu in EXACT_CLASSES else None
    m = measure(probe, prompts, src_onnx, here, other, reference=reference)
    drift = m["drift"]
    if m["graphs_agree"] is not None:
        log(f"the u8*u8 graph (CPUs without VNNI/AMX), run here: max |dp| {m['graphs_agree']['max_abs_prob']:.2g} "
            "from the u8*s8 graph")
    passed = drift["max_abs_prob"] <= THRESHOLD["max_abs_prob"] and drift["decisive_flips"] <= THRESHOLD["decisive_flips"]
    log(f"int8 drift: max |dp| {drift['max_abs_prob']:.4f}, {drift['top1_flips']}/{len(prompts)} top-1 flips "
        f"({drift['decisive_flips']} decisive); batch dependence {m['batch_dependence']['int8']['max_abs_prob']:.2g}, "
        f"cache dependence {m['cache_dependence']['int8']['max_abs_prob']:.2g} (CPU class {cpu})")
    speedup = m["speed"]["int8_vs_float32"]
    if speedup is not None:
        log(f"on this CPU (class {cpu}) INT8 prefilled the probes {speedup:.2f}x as fast as float32: "
            + ("deploy INT8" if speedup >= 1.2 else "INT8 gains little here; float32 gives the same answers without the drift"))
    return m, passed


def refusal(m: dict[str, Any], what_is_left: str) -> QuantizationError:
    """The error of an INT8 graph whose drift (judge's `m`) is above THRESHOLD."""
    drift = m["drift"]
    return QuantizationError(
        f"INT8 drift above threshold: max |dp| {drift['max_abs_prob']:.3f} (limit {THRESHOLD['max_abs_prob']}), "
        f"{drift['decisive_flips']} decisive top-1 flips (limit {THRESHOLD['decisive_flips']}) on {drift['probes']} probes; "
        f"{what_is_left}. Use force=True (--force) to keep INT8 anyway."
    )


def _record(plan: Int8Plan, count: int, m: dict[str, Any], passed: bool, force: bool, seconds: float,
            source_sha256: str | None, check: dict[str, Any], guards: int = 0) -> dict[str, Any]:
    """The manifest's `quantization` (docs/FORMAT.md)."""
    options, smoothing = plan.options, plan.smoothing
    return {
        "method": "dynamic-int8",
        "per_channel": True,
        "weight_type": "int8",
        "activations": plan.activations,
        "row_independent": plan.activations == "per_token",  # the runtime batches rows only when this is true
        "integer_format": plan.integer_format,
        "graphs": plan.graphs,  # CPU kernel path -> graph file (runtime quantized.graph_file); None: onnx_file everywhere
        "graphs_agree": m["graphs_agree"],  # the other path's graph run on this CPU (when exact here)
        "op_types": ["MatMul"],
        "quantized": count,
        "excluded": smoothing.float_modules,
        "smoothing": None if smoothing.record is None else smoothing.record | {"activations": plan.activations},
        "down_levels": options.down_levels if smoothing.record is not None else None,  # per-token levels of down_proj's input
        "softmax_nan_guards_dropped": guards,  # those the float32 source still had (softmax_guard.py)
        "drift": m["drift"],
        "threshold": dict(THRESHOLD, decisive_margin=DECISIVE_MARGIN),
        "probabilities": m["probabilities"],  # (probes, candidates) restricted softmax, for judging flips by eye
        "passed": passed,
        "forced": bool(force and not passed),
        "batch_dependence": m["batch_dependence"],
        "cache_dependence": m["cache_dependence"],
        "cpu": cpu_describe(),  # where the drift above was measured
        "speed": m["speed"],  # probe prefill, one session at a time, on that CPU
        "load_check": check,
        "seconds": round(seconds, 2),
        "source_onnx_sha256": source_sha256,
    }


def _discard(out_dir: Path, out_onnx: Path, in_place: bool) -> None:
    """Remove a refused INT8 graph; the float32 export stays usable."""
    if in_place:
        out_onnx.unlink(missing_ok=True)
        out_onnx.with_name(out_onnx.name + ".data").unlink(missing_ok=True)
        (out_dir / INT8_U8U8_ONNX_FILE).unlink(missing_ok=True)
    else:
        prepare_out_dir(out_dir)  # leave it empty rather than half-made


def _graph_opset(path: Path) -> int:
    import onnx

    return default_opset(onnx.load(str(path), load_external_data=False), 0)


def _install(out_dir: Path, src_onnx: Path, manifest: dict[str, Any], quantization: dict[str, Any], in_place: bool) -> dict[str, Any]:
    """Write the INT8 manifest (last, so the directory is never half-made); in place, the float32
    graph goes first."""
    if in_place:
        # Unfinished again until the new manifest lands; then drop the float32 graph.
        (out_dir / MANIFEST_FILE).unlink()
        (out_dir / ".verified.json").unlink(missing_ok=True)  # runtime stamps of the old files
        src_onnx.unlink()
        src_onnx.with_name(src_onnx.name + ".data").unlink(missing_ok=True)
    manifest = dict(manifest)
    manifest["onnx_file"] = INT8_ONNX_FILE
    manifest["opset"] = _graph_opset(out_dir / INT8_ONNX_FILE)  # 21 with per-token QuantizeLinear
    manifest["quantization"] = quantization
    # The self-check (vs PyTorch) ran on the float32 graph; INT8 is judged by the drift above.
    manifest["self_check"] = dict(manifest["self_check"], graph=f"{src_onnx.name} (float32, before quantization)")
    manifest["files"] = file_hashes(out_dir)
    write_manifest(out_dir, manifest)
    return manifest


def quantize_export(
    src_dir: Path,
    out_dir: Path | None = None,
    options: Int8Options | None = None,
    *,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Make an INT8 export from a finished float32 export; returns (and writes) its manifest.

    `out_dir` defaults to `src_dir` (in place: the float32 model files are replaced). No torch is
    needed: this works on the exported files alone. Raises QuantizationError above THRESHOLD
    unless `force`, leaving the float32 export (src_dir) untouched and usable. `options`
    (Int8Options) chooses smoothing, weight bits and down_proj levels; the defaults are the measured best.
    """
    return quantize_export_with(decide, src_dir, out_dir, options, force=force, progress=progress)


def quantize_export_with(
    decide_plan: Callable[..., Int8Plan],
    src_dir: Path,
    out_dir: Path | None = None,
    options: Int8Options | None = None,
    *,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """quantize_export with the plan made by `decide_plan` (signature of `decide`): the studies
    (export/studies/int8_variants.py) pass their own to export the schemes production does not write."""
    options = options or Int8Options()
    log = make_logger(progress)
    src_dir = Path(src_dir)
    out_dir = Path(out_dir) if out_dir is not None else src_dir
    in_place = out_dir.resolve() == src_dir.resolve()
    manifest = read_manifest(src_dir)
    if manifest.get("quantization") is not None:
        raise ExportError(f"{src_dir} is already quantized ({manifest['quantization']['method']})")
    src_onnx = src_dir / manifest["onnx_file"]
    if not in_place:
        prepare_out_dir(out_dir)
        for name in (LM_HEAD_FILE, TOKENIZER_FILE, CHAT_TEMPLATE_FILE):
            if (src_dir / name).is_file():
                shutil.copy2(src_dir / name, out_dir / name)
    out_onnx = out_dir / INT8_ONNX_FILE

    facts = manifest["tokenizer"]
    tok, probe, prompts = probe_set(src_dir, facts, manifest["architecture"])

    t0 = time.perf_counter()
    plan = decide_plan(src_onnx, options, tok, facts, log)
    smoothing = plan.smoothing
    log(f"quantizing MatMul weights to int8 per channel ({plan.activations} activations), keeping "
        f"{len(smoothing.float_nodes)} {SMOOTH_TARGET} MatMuls float32 ...")
    count = rewrite_matmuls(src_onnx, out_onnx, plan.rewrite, exclude=set(smoothing.float_nodes),
                            scale_rows=smoothing.scale_rows, scale_cols=smoothing.scale_cols, log=log)
    # An export made before softmax_guard.py still guards its softmaxes; its INT8 graph does not.
    guards = drop_softmax_nan_guards_in_file(out_onnx)
    if guards:
        log(f"dropped {guards} softmax NaN guards from the INT8 graph (softmax_guard.py)")
    if plan.graphs is not None:
        write_u8u8_graph(out_onnx, out_dir / plan.graphs["u8u8"])
    quant_seconds = time.perf_counter() - t0
    log(f"quantized {count} MatMuls in {quant_seconds:.1f} s; measuring drift on {len(PROBES)} probes ...")
    m, passed = judge(plan, probe, prompts, out_dir, src_onnx=src_onnx, log=log)
    if not passed and not force:
        _discard(out_dir, out_onnx, in_place)
        raise refusal(m, f"{src_dir} keeps its float32 export")
    quantization = _record(plan, count, m, passed, force, quant_seconds, manifest["files"].get(manifest["onnx_file"]),
                           load_check(prompts, probe.cands, m["p8"]), guards)
    manifest = _install(out_dir, src_onnx, manifest, quantization, in_place)
    log(f"wrote {MANIFEST_FILE}: {out_dir} is a usable INT8 export")
    return manifest
