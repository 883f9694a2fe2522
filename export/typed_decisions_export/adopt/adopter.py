"""`adopt_onnx`: an existing ONNX decoder export -> a checked export directory (docs/FORMAT.md).

inspect (structure only: refusals first) -> tokenizer files -> load the graph -> find the LM head
-> lm_head.npy -> cut the graph -> model.onnx (+ .data) -> self-check against the unmodified
source graph -> manifest.json last. As with `export_model`, a directory without manifest.json is
unfinished and unusable. Torch-free: onnx, numpy, tokenizers and ONNX Runtime only.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from typed_decisions.artifacts import sha256_file

from ..errors import SelfCheckError
from ..layout import ONNX_FILE, SELF_CHECK_FAILURE_FILE, make_logger, peak_rss_bytes, prepare_out_dir
from ..manifest import FORMAT_VERSION_2D_MASK, LM_HEAD_FILE, MANIFEST_FILE, architecture, file_hashes, write_manifest
from .check import plan_prompts, reference_sequences, run_adopt_check, source_logits
from .errors import AdoptError
from .graph import Head, cut_head, find_head
from .source import Source, inspect_source
from .tokenizer import write_tokenizer_files


def _versions() -> dict[str, str]:
    out = {}
    for key, dist in (("onnx", "onnx"), ("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers"),
                      ("typed_decisions_export", "typed-decisions-export")):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = "unknown"
    return out


def _source_sha256(src: Source) -> str:
    """sha256 of the `sha256sum`-style listing of the graph and its external-data files."""
    listing = "".join(f"{sha256_file(p)}  {p.name}\n" for p in [src.onnx_path, *src.data_files])
    return hashlib.sha256(listing.encode()).hexdigest()


def _is_tied(graph, head: Head) -> bool:
    """Does the head multiply by the input embedding (the table a Gather reads)? Either the same
    initializer, or (when the exporter duplicated it) one holding the same values."""
    from onnx import numpy_helper

    tables = {n.input[0] for n in graph.node if n.op_type == "Gather"}
    if head.weight_name in tables:
        return True
    inits = {i.name: i for i in graph.initializer}
    return any(
        tuple(inits[t].dims) == head.weight.shape and np.array_equal(numpy_helper.to_array(inits[t]), head.weight)
        for t in tables if t in inits
    )


def _architecture(src: Source, head: Head) -> dict[str, Any]:
    """The manifest's `architecture`: config.json for the names, the graph for the cache geometry,
    and the graph's own tail for logit scale and soft-cap (what the adopted ONNX really computes)."""
    config = SimpleNamespace(**src.config)
    geometry = {"num_layers": src.num_layers, "num_kv_heads": src.num_kv_heads, "head_dim": src.head_dim}
    try:
        arch = architecture(config, geometry, head.weight.shape)
    except AttributeError as e:
        raise AdoptError(f"{src.root / 'config.json'}: {e.name or e} is missing; the manifest needs "
                         "model_type, num_attention_heads and hidden_size") from e
    if arch["hidden_size"] != head.weight.shape[1]:
        raise AdoptError(f"the LM head found ({head.node}) is (vocab {head.weight.shape[0]}, hidden "
                         f"{head.weight.shape[1]}) but config.json says hidden_size {arch['hidden_size']}")
    arch["logit_scale"] = head.logit_scale
    arch["final_logit_softcapping"] = head.softcap
    return arch


def adopt_onnx(src_dir: str | Path, out_dir: str | Path, *, name: str | None = None,
               progress: bool = True) -> dict[str, Any]:
    """Adopt the ONNX decoder export in `src_dir` (Optimum's layout) into `out_dir`; returns the manifest.

    Raises AdoptError (nothing usable written) for a graph the runtime cannot drive, naming what
    was found, and SelfCheckError (no manifest) when the adopted directory does not reproduce the
    source graph's logits.
    """
    import onnx

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    log = make_logger(progress)
    src = inspect_source(src_dir)
    log(f"{src.onnx_path}: {src.format} export, {src.num_layers} layers, {src.num_kv_heads} KV heads x "
        f"{src.head_dim}, opset {src.opset}, made by {src.producer or 'an unnamed producer'}")
    prepare_out_dir(out_dir)
    tokenizer_facts = write_tokenizer_files(src.root, out_dir, src.config)

    try:
        model = onnx.load(str(src.onnx_path))  # with its external data: the head is one of them
    except Exception as e:  # onnx raises OSError, ValueError or its own errors
        raise AdoptError(f"{src.onnx_path}: onnx could not read the graph with its weights "
                         f"({', '.join(p.name for p in src.data_files) or 'no external data'}): {e}") from e
    head = find_head(model.graph)
    tied = _is_tied(model.graph, head)
    log(f"LM head: {head.op_type} '{head.node}' on '{head.hidden}', weight '{head.weight_name}' "
        f"{list(head.weight.shape)}{' (tied to the embedding)' if tied else ''}, then "
        f"{' -> '.join(head.tail) or 'nothing'} (logit scale {head.logit_scale}, soft-cap {head.softcap})")
    arch = _architecture(src, head)
    np.save(out_dir / LM_HEAD_FILE, head.weight)
    cut_head(model, head)
    onnx.save_model(model, str(out_dir / ONNX_FILE), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=ONNX_FILE + ".data")
    lm_shape, head_info = list(head.weight.shape), {
        "node": head.node, "op_type": head.op_type, "hidden": head.hidden, "weight": head.weight_name,
        "tied": tied, "stored_transposed": head.stored_transposed, "tail": list(head.tail),
    }
    del model, head
    gc.collect()
    log(f"wrote {ONNX_FILE} (logits cut, last_hidden_state out) and {LM_HEAD_FILE} {lm_shape}")

    chat_template_file = tokenizer_facts["chat_template_file"]
    template = (out_dir / chat_template_file).read_text(encoding="utf-8") if chat_template_file else None
    plan = plan_prompts(out_dir, tokenizer_facts, template, lm_shape[0])
    log(f"self-check: the source graph on {len(reference_sequences(plan))} sequences ...")
    refs = source_logits(src.onnx_path, reference_sequences(plan), src.num_kv_heads, src.head_dim, src.kv_dtype)
    try:
        check = run_adopt_check(out_dir, ONNX_FILE, arch, plan, refs, log=log)
    except AssertionError as e:  # e.g. present.* of different lengths (a truncating sliding-window cache)
        raise AdoptError(f"the adopted graph does not behave as the format needs: {e}") from e
    if not check["passed"]:
        with open(out_dir / SELF_CHECK_FAILURE_FILE, "w", encoding="utf-8") as f:
            json.dump(check, f, indent=2)
        raise SelfCheckError(f"self-check failed, {out_dir} has no manifest and is unusable: "
                             f"{'; '.join(check['failures'])} (details in {SELF_CHECK_FAILURE_FILE})")

    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION_2D_MASK,  # Optimum's (B, P + T) mask: never packed
        "name": name or src.root.name,
        "architecture": arch,
        "onnx_file": ONNX_FILE,
        "attention_mask": "2d",
        "dtype": "float16" if src.kv_dtype == "float16" else "float32",
        "opset": src.opset,
        "quantization": None,
        "lm_head": {"file": LM_HEAD_FILE, "dtype": str(np.load(out_dir / LM_HEAD_FILE, mmap_mode="r").dtype),
                    "shape": lm_shape},
        "tokenizer": tokenizer_facts,
        "source": {
            "kind": "onnx", "format": src.format, "path": str(src.root), "onnx_file": src.onnx_path.name,
            "sha256": _source_sha256(src), "producer": src.producer,
            "transformers_version": src.config.get("transformers_version"), "lm_head": head_info,
        },
        "versions": _versions(),
        "export": {"road": "adopt", "seconds": round(time.perf_counter() - t0, 2), "peak_rss_bytes": peak_rss_bytes()},
        "self_check": check,
        "files": file_hashes(out_dir),
    }
    write_manifest(out_dir, manifest)
    log(f"wrote {MANIFEST_FILE}: {out_dir} is a usable export adopted from {src.root}")
    return manifest


__all__ = ["adopt_onnx"]
