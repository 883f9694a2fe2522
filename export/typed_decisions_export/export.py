"""`export_model`: source -> checked export directory, in the order that keeps failures harmless.

load (transformers, float32) -> tokenizer files -> lm_head.npy -> model.onnx (+ .data) ->
self-check against PyTorch -> manifest.json last -> optionally INT8 (int8/pipeline.py), which re-checks
drift and rewrites the manifest. A directory without manifest.json is unfinished and unusable.

With the builder, INT8 is written straight from the source instead (int8/direct.py): the INT8
graph in place of model.onnx, checked on the prefix and by the drift probe, then the manifest.

With the graph builder (builder=, builder_choice.py) the backbone and the LM head come from the
safetensors files or the GGUF file, tensor by tensor, and the self-check runs on a prefix of the
model (prefix_check.py): no step holds the whole float model.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .builder_choice import choose_builder
from .errors import ExportError, SelfCheckError
from .int8.options import Int8Options
from .int8.quantized_graph import BLOCKED_QUANTIZE_OPSET
from .layout import (
    INT8_ONNX_FILE,
    ONNX_FILE,
    SELF_CHECK_FAILURE_FILE,
    make_logger,
    peak_rss_bytes,
    prepare_out_dir,
)
from .loading import load_source, load_tokenizer, resolve_source, source_facts
from .manifest import (
    LM_HEAD_FILE,
    MANIFEST_FILE,
    architecture,
    file_hashes,
    format_version,
    lm_head_weight,
    package_versions,
    write_manifest,
)
from .onnx_export import export_backbone
from .prefix_check import run_prefix_check
from .selfcheck import plan_self_check, run_self_check, torch_references
from .tokenizer_files import write_tokenizer_files


def export_model(
    source: str | Path,
    out_dir: Path,
    *,
    quantize: str | None = None,
    name: str | None = None,
    opset: int = 18,
    progress: bool = True,
    force: bool = False,
    int8: Int8Options | None = None,
    builder: str = "auto",
    hidden_layers: str | Sequence[int] = "auto",
) -> dict[str, Any]:
    """Export `source` (HF folder, .gguf file or catalogue name) to `out_dir`; returns the manifest.

    Raises SelfCheckError (no manifest written) when ONNX Runtime disagrees with PyTorch, and
    QuantizationError when `quantize="int8"` drifts beyond the threshold and `force` is False.
    `int8` (Int8Options, default: its defaults) is passed to quantize_export. `builder` ("off",
    "on", "auto") chooses who writes the backbone graph (builder_choice.py). `hidden_layers`: the
    builder's mid-layer outputs `hidden_state.{k}` ("auto": n // 2 and 2n // 3; "none"; or ks such
    as "15,20"; builder.decoder.hidden_layer_set); a traced export has none.
    """
    import json

    if quantize not in (None, "int8"):
        raise ExportError(f"quantize={quantize!r}: the only supported value is 'int8'")
    if quantize is None and int8 is not None:  # refused before the (long) export, not after
        raise ExportError("INT8 options (smooth / keep_float / weight_bits / down_levels) apply to INT8 only (quantize='int8')")
    if opset < 18:
        raise ExportError(f"opset={opset}: the format needs opset >= 18")
    out_dir = Path(out_dir)
    log = make_logger(progress)
    t0 = time.perf_counter()
    prepare_out_dir(out_dir)

    resolved = resolve_source(source)
    chosen = choose_builder(builder, resolved[0], resolved[1], log=log)
    mids = _hidden_layers(chosen, hidden_layers, log=log)
    direct = None  # Int8Options when the builder writes INT8 straight from the source (int8/direct.py)
    if chosen is not None and quantize == "int8":
        from .int8.direct import direct_refusal

        reason = direct_refusal(int8 or Int8Options())
        if reason is None:
            direct = int8 or Int8Options()
        else:
            log(f"INT8 through a float32 export: {reason}")
    if chosen is None:
        steps = _traced_steps(source, resolved, out_dir, opset=opset, log=log, progress=progress)
    else:
        steps = _builder_steps(chosen, resolved, out_dir, opset=opset, log=log, progress=progress,
                               int8=quantize == "int8", direct=direct, hidden_layers=mids)
    geometry, arch, plan, refs, tokenizer_facts, lm_shape, source_info, default_name, written = steps
    onnx_file = ONNX_FILE if written is None else INT8_ONNX_FILE
    if chosen is None:
        check = run_self_check(out_dir, ONNX_FILE, arch, plan, refs, log=log)
    else:
        check = run_prefix_check(out_dir, *chosen, arch, plan, log=log, opset=opset, onnx_file=onnx_file,
                                 weight_levels=None if direct is None else direct.integer_format.weight_levels)
    if not check["passed"]:
        with open(out_dir / SELF_CHECK_FAILURE_FILE, "w", encoding="utf-8") as f:
            json.dump(check, f, indent=2)
        raise SelfCheckError(
            f"self-check failed, {out_dir} has no manifest and is unusable: {'; '.join(check['failures'])} "
            f"(details in {SELF_CHECK_FAILURE_FILE})"
        )

    quantization = None
    if written is not None:
        from .int8.direct import judge_direct

        quantization = judge_direct(*chosen, out_dir, written, tokenizer_facts, arch, force=force, log=log)
        check = dict(check, graph=f"{ONNX_FILE} (float32, the builder's graph of the checked prefix; "
                                  f"{INT8_ONNX_FILE}'s integers are its weights quantized again)")
    manifest: dict[str, Any] = {
        "format_version": format_version(geometry["attention_mask"]),
        "name": name or default_name,
        "architecture": arch,
        "onnx_file": onnx_file,
        "attention_mask": geometry["attention_mask"],
        "dtype": "float32",
        "opset": opset if written is None else BLOCKED_QUANTIZE_OPSET,
        "graph_rewrites": {"softmax_nan_guards_dropped": geometry["softmax_nan_guards_dropped"]},
        "hidden_layers": geometry.get("hidden_layers", []),
        "quantization": quantization,
        "lm_head": {"file": LM_HEAD_FILE, "dtype": "float32", "shape": list(lm_shape)},
        "tokenizer": tokenizer_facts,
        "source": source_info,
        "versions": package_versions(),
        "export": {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_bytes": peak_rss_bytes(),
                   "graph": "traced" if chosen is None else "builder"},
        "self_check": check,
        "files": file_hashes(out_dir),
    }
    write_manifest(out_dir, manifest)
    log(f"wrote {MANIFEST_FILE}: {out_dir} is a usable {'float32' if written is None else 'INT8'} export")
    if quantize == "int8" and written is None:
        from .int8.pipeline import quantize_export

        manifest = quantize_export(out_dir, out_dir, int8, force=force, progress=progress)
        manifest["export"] = {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_bytes": peak_rss_bytes(),
                              "graph": "traced" if chosen is None else "builder"}
        write_manifest(out_dir, manifest)
    return manifest


def _hidden_layers(chosen, wanted: str | Sequence[int], *, log) -> list[int]:
    """The mid-layer outputs the export writes: the builder's (checked against the model's depth
    before anything is written), none for a traced graph (asking for some there is an error)."""
    from .builder.decoder import hidden_layer_set

    if chosen is None:
        named = isinstance(wanted, str) and wanted.strip().lower() not in ("auto", "none", "off", "")
        if named or (not isinstance(wanted, str) and len(wanted) > 0):
            raise ExportError(f"hidden_layers={wanted!r}: mid-layer outputs are written by the graph builder only "
                              f"(--builder on, or auto with a supported architecture); a traced graph has none")
        log("traced export: no mid-layer outputs (hidden_state.*); heads read the last layer")
        return []
    try:
        return hidden_layer_set(chosen[0].num_layers, wanted)
    except ValueError as e:
        raise ExportError(str(e)) from None


def _traced_steps(source, resolved, out_dir: Path, *, opset: int, log, progress: bool) -> tuple:
    """transformers model -> tokenizer files, lm_head.npy, torch.onnx trace, self-check references."""
    import torch

    loaded = load_source(source, log=log, progress=progress, resolved=resolved)
    model, tokenizer = loaded.model, loaded.tokenizer
    tokenizer_facts = write_tokenizer_files(tokenizer, out_dir)

    lm_head = lm_head_weight(model)  # (V, H)
    np.save(out_dir / LM_HEAD_FILE, lm_head)
    log(f"wrote {LM_HEAD_FILE} {lm_head.shape}")
    lm_shape = lm_head.shape
    del lm_head

    with torch.no_grad():
        geometry = export_backbone(model, out_dir / ONNX_FILE, opset=opset, log=log)
    arch = architecture(model.config, geometry, lm_shape)
    plan = plan_self_check(tokenizer, out_dir, tokenizer_facts, lm_shape[0])
    log(f"self-check: transformers reference on {len(plan.reference_sequences())} sequences ...")
    refs = torch_references(model, plan.reference_sequences(), plan.candidates)
    source_info, default_name = loaded.source, loaded.default_name
    # Free the float32 weights before ONNX Runtime loads its own copy (and before INT8 does).
    del model, tokenizer, loaded
    gc.collect()
    return geometry, arch, plan, refs, tokenizer_facts, lm_shape, source_info, default_name, None


def _builder_steps(chosen, resolved, out_dir: Path, *, opset: int, log, progress: bool, int8: bool = False,
                   direct: Int8Options | None = None, hidden_layers: Sequence[int] = ()) -> tuple:
    """Graph builder: tokenizer files, lm_head.npy and the backbone from the source's tensors (safetensors
    or GGUF, one at a time, no torch model); the self-check's references come later, from a prefix
    model (prefix_check.py), so no step holds the whole float model. The disk is checked first.
    With `direct` (Int8Options) the backbone is the INT8 graph, written straight from the source."""
    from .builder import build_backbone, write_lm_head
    from .builder.disk import check_disk

    spec, source = chosen
    from .int8.float_reference import SEGMENT_BYTES

    need = check_disk(out_dir, spec, int8=int8, direct=direct is not None, segment_bytes=SEGMENT_BYTES)
    log(f"disk: the export writes about {need / 1e9:.2f} GB")
    kind, path, catalogue_name = resolved
    source_info, default_name = source_facts(kind, path, catalogue_name, log=log)
    tokenizer = load_tokenizer(kind, path, log=log)
    tokenizer_facts = write_tokenizer_files(tokenizer, out_dir)
    lm_shape = write_lm_head(source, out_dir / LM_HEAD_FILE, spec=spec)
    log(f"wrote {LM_HEAD_FILE} {lm_shape}")
    bar = _tensor_bar(progress)
    written = None
    try:
        if direct is None:
            geometry = build_backbone(source, out_dir / ONNX_FILE, spec=spec, opset=opset, log=log, progress=bar,
                                      hidden_layers=hidden_layers)
        else:
            from .int8.direct import write_int8_backbone

            written = write_int8_backbone(spec, source, out_dir, direct, opset=opset, log=log, progress=bar,
                                          hidden_layers=hidden_layers)
            geometry = written.geometry
    finally:
        if progress:
            bar.close()
    arch = architecture(source.transformers_config(), geometry, lm_shape)
    plan = plan_self_check(tokenizer, out_dir, tokenizer_facts, lm_shape[0])
    del tokenizer
    gc.collect()
    return geometry, arch, plan, None, tokenizer_facts, lm_shape, source_info, default_name, written


def _tensor_bar(progress: bool):
    """A callable(name) that advances a progress bar per written tensor (and has .close())."""
    if not progress:
        class _Silent:
            def __call__(self, name: str) -> None:
                pass

            def close(self) -> None:
                pass

        return _Silent()
    from tqdm import tqdm

    bar = tqdm(desc="builder: tensors", unit=" tensors", file=__import__("sys").stderr, leave=False)

    class _Bar:
        def __call__(self, name: str) -> None:
            bar.set_postfix_str(name[-40:], refresh=False)
            bar.update(1)

        def close(self) -> None:
            bar.close()

    return _Bar()
