"""manifest.json: architecture facts, LM head, versions, file hashes, and writing it last.

The manifest is written only after every file is in place and checked; its presence is what makes
a directory usable (docs/FORMAT.md). It is written to a temporary name and renamed, so a crash
never leaves a half-written manifest beside files it does not describe.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ExportError
from .loading import sha256_file

FORMAT_VERSION = 2  # the attention_mask input is (batch, 1, seq, past_seq + seq) bool
FORMAT_VERSION_2D_MASK = 1  # the attention_mask input is (batch, past_seq + seq): still written where
# a 4-D mask does not apply (sliding-window models, adopted graphs), so older runtimes read them.


def format_version(attention_mask: str) -> int:
    """The manifest's format_version for a graph whose attention_mask is "4d" or "2d"."""
    return FORMAT_VERSION if attention_mask == "4d" else FORMAT_VERSION_2D_MASK
MANIFEST_FILE = "manifest.json"
LM_HEAD_FILE = "lm_head.npy"


def package_versions() -> dict[str, str]:
    """Versions of the packages that shaped the graph and the weights."""
    out = {}
    for key, dist in (
        ("torch", "torch"),
        ("transformers", "transformers"),
        ("onnx", "onnx"),
        ("onnxscript", "onnxscript"),
        ("onnxruntime", "onnxruntime"),
        ("typed_decisions_export", "typed-decisions-export"),
    ):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = "unknown"
    return out


def lm_head_weight(model: Any) -> np.ndarray:
    """The LM head as a C-ordered (vocab, hidden) float32 array.

    `get_output_embeddings()` is the module the model really multiplies by: the input embedding
    when tied, a separate matrix when the checkpoint (or a GGUF's `output.weight`) has one.
    """
    head = model.get_output_embeddings()
    if head is None:
        raise ExportError(f"{type(model).__name__} has no output embeddings (LM head)")
    if getattr(head, "bias", None) is not None:
        raise ExportError("LM heads with a bias are not supported by format version 1")
    return np.ascontiguousarray(head.weight.detach().float().numpy())  # (V, H)


def logit_scale_of(config: Any) -> float:
    """The factor applied to the LM head's output: Cohere's `logit_scale` multiplies, Granite's
    `logits_scaling` divides; every other model uses 1.0."""
    if getattr(config, "logit_scale", None) is not None:
        return float(config.logit_scale)
    if getattr(config, "logits_scaling", None) is not None:
        return 1.0 / float(config.logits_scaling)
    return 1.0


def architecture(config: Any, geometry: dict[str, int], lm_head_shape: tuple[int, int]) -> dict[str, Any]:
    """The manifest's `architecture` from the config and the traced cache geometry."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    window = getattr(config, "sliding_window", None)
    uses_window = uses_sliding_window(config)
    softcap = getattr(config, "final_logit_softcapping", None)
    return {
        "model_type": config.model_type,
        "num_layers": geometry["num_layers"],
        "num_attention_heads": int(config.num_attention_heads),
        "num_kv_heads": geometry["num_kv_heads"],
        "head_dim": geometry["head_dim"],
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(lm_head_shape[0]),
        "sliding_window": int(window) if (window and uses_window) else None,
        "final_logit_softcapping": float(softcap) if softcap else None,
        "logit_scale": logit_scale_of(config),
        "max_position_embeddings": getattr(config, "max_position_embeddings", None),
    }


def uses_sliding_window(config: Any) -> bool:
    """Whether some layer attends through a sliding window (then the graph keeps the 2-D mask:
    a 4-D mask is used as is by transformers and would bypass the window)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    if layer_types:
        return "sliding_attention" in layer_types
    return bool(window and getattr(config, "use_sliding_window", True))


def file_hashes(out_dir: Path) -> dict[str, str]:
    """sha256 of every file in out_dir except manifest.json, by name (the manifest's `files`).

    Dot-files are not part of the export: the runtime keeps its verification stamps in one.
    """
    return {
        p.name: sha256_file(p)
        for p in sorted(out_dir.iterdir())
        if p.is_file() and p.name != MANIFEST_FILE and not p.name.startswith(".")
    }


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    """Write manifest.json atomically (temporary file, then rename)."""
    tmp = out_dir / (MANIFEST_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(tmp, out_dir / MANIFEST_FILE)


def read_manifest(out_dir: Path) -> dict[str, Any]:
    path = out_dir / MANIFEST_FILE
    if not path.is_file():
        raise ExportError(f"{out_dir} has no {MANIFEST_FILE}: not a finished export")
    with open(path, encoding="utf-8") as f:
        return json.load(f)
