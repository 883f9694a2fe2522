"""INT8: dynamic quantization of a checked float32 export, refused when it moves the answers.

Method: ONNX Runtime's dynamic INT8 for MatMul (the graph pattern `quantize_dynamic` emits, written
by int8_matmul.py one weight at a time because quantize_dynamic needs ~3x the float32 model in
RAM): MatMuls with constant weights only, symmetric int8 weights per output channel, activations
quantized at run time (uint8, one scale per tensor per call). The
MLP `down_proj` MatMuls stay float32: their inputs (after the gated activation) have the widest
range, and a colleague measured on Qwen2.5-0.5B that quantizing them (per-tensor) moved restricted
softmax probabilities by up to 0.25 and flipped the top answer on 4/8 prompts, while per-channel
with down_proj excluded moved them <= 0.05, flipped none, and was about 2x faster at prefill.

Drift is measured on a fixed probe set (8 lettered multiple-choice questions, candidates the
tokens of 'A'..'E'): float32 ONNX vs INT8 ONNX, softmax restricted to the candidates. Refused
(INT8 files removed, QuantizationError) when any probability moves by more than 0.10, or when a
top-1 answer flips although float32 preferred it by a margin of at least 0.20 (a "decisive" flip;
near-ties may flip within the 0.10 tolerance), unless `force`.

Because activation scales are computed per call over the whole input tensor, INT8 results can
depend on what else is in the batch (other rows, padding) and on how the prompt is split between
prefill and cached steps. Both are measured and recorded (`batch_dependence`, `cache_dependence`),
next to the same numbers for float32 as a baseline.
"""

from __future__ import annotations

import ast
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ExportError, QuantizationError
from .int8_matmul import quantize_matmuls
from .manifest import LM_HEAD_FILE, MANIFEST_FILE, file_hashes, read_manifest, write_manifest
from .ort_backbone import OrtBackbone, candidate_logits, left_padded, restricted_softmax
from .tokenizer_files import CHAT_TEMPLATE_FILE, TOKENIZER_FILE, candidate_ids, encode_prompt, render_chat

INT8_ONNX_FILE = "model.int8.onnx"
EXCLUDED_MODULES = ("down_proj",)  # module-name suffixes whose MatMuls stay float32
THRESHOLD = {"max_abs_prob": 0.10, "decisive_flips": 0}
# A flip counts against INT8 only when float32 preferred its answer by at least this much: with
# every probability allowed to move by 0.10, a top-2 margin under 0.20 can flip within tolerance,
# and such near-ties say nothing about whether INT8 changed the model's mind.
DECISIVE_MARGIN = 0.20

PROBE_SYSTEM = "Answer with the letter of the correct option only."
PROBES = [
    "Which planet is closest to the Sun? A) Venus B) Mercury C) Mars D) Earth E) Jupiter",
    "What is 6 times 7? A) 42 B) 36 C) 48 D) 13 E) 67",
    "Which of these is a prime number? A) 21 B) 27 C) 29 D) 33 E) 39",
    "Water boils at sea level at A) 50 C B) 75 C C) 90 C D) 100 C E) 120 C",
    "Which word is a verb? A) table B) quickly C) run D) blue E) under",
    "Which language runs natively in web browsers? A) COBOL B) JavaScript C) Fortran D) Ada E) Lisp",
    "What does HTTP status 404 mean? A) OK B) moved C) not found D) server error E) unauthorized",
    "Which is the largest ocean? A) Atlantic B) Indian C) Arctic D) Pacific E) Southern",
]
CANDIDATE_TEXTS = ["A", "B", "C", "D", "E"]


def _excluded_nodes(onnx_path: Path) -> tuple[list[str], list[str]]:
    """(MatMul node names to keep float32, their module names) found from the exporter's metadata.

    The dynamo exporter records each node's module path in `pkg.torch.onnx.name_scopes`, e.g.
    "['', 'base', 'base.layers.0', 'base.layers.0.mlp', 'base.layers.0.mlp.down_proj', 'linear_6']".
    """
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    nodes, modules = [], []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), "")
        try:
            scope_list = ast.literal_eval(scopes) if scopes else []
        except (ValueError, SyntaxError):
            scope_list = []
        hit = next((s for s in scope_list if s.split(".")[-1] in EXCLUDED_MODULES), None)
        if hit is not None:
            nodes.append(node.name)
            modules.append(hit.removeprefix("base."))
    return nodes, modules


def _probe_tokenizer(export_dir: Path, facts: dict[str, Any]) -> Any:
    """A transformers tokenizer rebuilt from the exported files only (what the runtime has)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(export_dir / TOKENIZER_FILE),
        bos_token=facts["bos_token"],
        eos_token=facts["eos_token"],
        pad_token=facts["pad_token"],
    )
    template = export_dir / CHAT_TEMPLATE_FILE
    if facts.get("chat_template_file") and template.is_file():
        tok.chat_template = template.read_text(encoding="utf-8")
    return tok


class _Probe:
    """Restricted-softmax probabilities of the probe set through one ORT backbone."""

    def __init__(self, lm_head: np.ndarray, cands: list[int], arch: dict[str, Any], pad_id: int):
        self.lm_head, self.cands, self.arch, self.pad_id = lm_head, cands, arch, pad_id

    def probs(self, hidden_rows: np.ndarray) -> np.ndarray:  # (B, H) -> (B, K)
        logits = candidate_logits(
            hidden_rows.astype(np.float64),
            self.lm_head,
            self.cands,
            logit_scale=self.arch["logit_scale"],
            softcap=self.arch["final_logit_softcapping"],
        )
        return restricted_softmax(logits)

    def alone(self, ort: OrtBackbone, prompts: list[list[int]]) -> np.ndarray:  # (N, K)
        return np.concatenate([self.probs(ort.prefill(ids)[0][:, -1]) for ids in prompts])

    def batched(self, ort: OrtBackbone, prompts: list[list[int]]) -> np.ndarray:  # (N, K)
        hidden, _ = ort.run(*left_padded(prompts, self.pad_id))
        return self.probs(hidden[:, -1])

    def cached(self, ort: OrtBackbone, prompts: list[list[int]], k: int = 3) -> np.ndarray:  # (N, K)
        rows = []
        for ids in prompts:
            n = len(ids) - k
            _, present = ort.prefill(ids[:n])
            hidden, _ = ort.run(np.array([ids[n:]]), np.ones((1, n + k), np.int64), np.arange(n, n + k)[None], present)
            rows.append(self.probs(hidden[:, -1]))
        return np.concatenate(rows)


def _compare(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """How far table b (N, K) moved from reference table a: max abs probability difference, top-1
    flips, and the flips where a's own top-2 margin was at least DECISIVE_MARGIN.

    >>> a = np.array([[0.65, 0.35], [0.51, 0.49]]); b = np.array([[0.35, 0.65], [0.48, 0.52]])
    >>> _compare(a, b) == {"max_abs_prob": 0.3, "top1_flips": 2, "decisive_flips": 1}
    True
    """
    top2 = np.sort(a, axis=-1)[:, -2:]  # (N, 2)
    margin = top2[:, 1] - top2[:, 0]  # (N,)
    flipped = a.argmax(-1) != b.argmax(-1)  # (N,)
    return {
        "max_abs_prob": round(float(np.max(np.abs(a - b))), 12),
        "top1_flips": int(flipped.sum()),
        "decisive_flips": int((flipped & (margin >= DECISIVE_MARGIN)).sum()),
    }


def quantize_export(src_dir: Path, out_dir: Path | None = None, *, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Make an INT8 export from a finished float32 export; returns (and writes) its manifest.

    `out_dir` defaults to `src_dir` (in place: the float32 model files are replaced). No torch is
    needed: this works on the exported files alone. Raises QuantizationError above THRESHOLD
    unless `force`, leaving the float32 export (src_dir) untouched and usable.
    """
    from .export import make_logger, prepare_out_dir

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

    t0 = time.perf_counter()
    nodes, modules = _excluded_nodes(src_onnx)
    log(f"quantizing MatMul weights to int8 per channel, keeping {len(nodes)} down_proj MatMuls float32 ...")
    count = quantize_matmuls(src_onnx, out_onnx, exclude=set(nodes), log=log)
    quant_seconds = time.perf_counter() - t0
    log(f"quantized {count} MatMuls in {quant_seconds:.1f} s; measuring drift on {len(PROBES)} probes ...")

    facts, arch = manifest["tokenizer"], manifest["architecture"]
    tok = _probe_tokenizer(src_dir, facts)
    lm_head = np.load(src_dir / LM_HEAD_FILE, mmap_mode="r")  # (V, H)
    cands = candidate_ids(tok, CANDIDATE_TEXTS, fallback_vocab=lm_head.shape[0])
    prompts = [encode_prompt(tok, render_chat(tok, q, PROBE_SYSTEM), facts["add_bos_token"]) for q in PROBES]
    pad_id = facts["pad_token_id"] if facts["pad_token_id"] is not None else 0
    probe = _Probe(lm_head, cands, arch, pad_id)
    tables = {}
    for dtype, path in (("float32", src_onnx), ("int8", out_onnx)):
        ort = OrtBackbone(path)  # one session at a time: the float32 one holds the whole model
        tables[dtype] = (probe.alone(ort, prompts), probe.batched(ort, prompts), probe.cached(ort, prompts))
        del ort
    (p32, b32, c32), (p8, b8, c8) = tables["float32"], tables["int8"]  # each (probes, candidates)
    drift = _compare(p32, p8) | {"probes": len(prompts), "candidates": len(cands)}
    batch_dep = {"int8": _compare(p8, b8), "float32": _compare(p32, b32)}
    cache_dep = {"int8": _compare(p8, c8), "float32": _compare(p32, c32)}
    passed = drift["max_abs_prob"] <= THRESHOLD["max_abs_prob"] and drift["decisive_flips"] <= THRESHOLD["decisive_flips"]
    log(
        f"int8 drift: max |dp| {drift['max_abs_prob']:.4f}, {drift['top1_flips']}/{len(prompts)} top-1 flips "
        f"({drift['decisive_flips']} decisive); "
        f"batch dependence {batch_dep['int8']['max_abs_prob']:.4f}, cache dependence {cache_dep['int8']['max_abs_prob']:.4f}"
    )
    if not passed and not force:
        if in_place:
            out_onnx.unlink(missing_ok=True)
            out_onnx.with_name(out_onnx.name + ".data").unlink(missing_ok=True)
        else:
            prepare_out_dir(out_dir)  # leave it empty rather than half-made
        raise QuantizationError(
            f"INT8 drift above threshold: max |dp| {drift['max_abs_prob']:.3f} (limit {THRESHOLD['max_abs_prob']}), "
            f"{drift['decisive_flips']} decisive top-1 flips (limit {THRESHOLD['decisive_flips']}) on {len(prompts)} probes; "
            f"{src_dir} keeps its float32 export. Use force=True (--force) to keep INT8 anyway."
        )

    quantization = {
        "method": "dynamic-int8",
        "per_channel": True,
        "weight_type": "int8",
        "op_types": ["MatMul"],
        "quantized": count,
        "excluded": modules,
        "drift": drift,
        "threshold": dict(THRESHOLD, decisive_margin=DECISIVE_MARGIN),
        "probabilities": {  # (probes, candidates) restricted softmax, for judging flips by eye
            "float32": np.round(p32, 4).tolist(),
            "int8": np.round(p8, 4).tolist(),
        },
        "passed": passed,
        "forced": bool(force and not passed),
        "batch_dependence": batch_dep,
        "cache_dependence": cache_dep,
        "seconds": round(quant_seconds, 2),
        "source_onnx_sha256": manifest["files"].get(manifest["onnx_file"]),
    }
    if in_place:
        # Unfinished again until the new manifest lands; then drop the float32 graph.
        (out_dir / MANIFEST_FILE).unlink()
        (out_dir / ".verified.json").unlink(missing_ok=True)  # runtime stamps of the old files
        src_onnx.unlink()
        src_onnx.with_name(src_onnx.name + ".data").unlink(missing_ok=True)
    manifest = dict(manifest)
    manifest["onnx_file"] = INT8_ONNX_FILE
    manifest["quantization"] = quantization
    # The self-check (vs PyTorch) ran on the float32 graph; INT8 is judged by the drift above.
    manifest["self_check"] = dict(manifest["self_check"], graph=f"{src_onnx.name} (float32, before quantization)")
    manifest["files"] = file_hashes(out_dir)
    write_manifest(out_dir, manifest)
    log(f"wrote {MANIFEST_FILE}: {out_dir} is a usable INT8 export")
    return manifest
