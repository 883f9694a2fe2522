"""The graph builder: the backbone ONNX graph written with the ONNX helper API from config.json,
the weights streamed tensor by tensor from safetensors into the external-data file, no torch model.

It writes the interface the traced export writes (onnx_export.py, docs/FORMAT.md), so the runtime
and the self-check treat both alike; the traced path stays the fallback for every model_type no
family file knows, and the oracle of the builder's tests (tests/export/test_builder.py).

    spec = plan(folder)                       # families/<family>.py reads config.json
    geometry = build_backbone(folder, out / "model.onnx")
    write_lm_head(folder, out / "lm_head.npy")

Layout: errors.py, rope.py (inverse frequencies), weights.py (safetensors, one tensor at a time),
graph.py (the writer, external data), ops.py (norm, RoPE, attention, MLP, masks), decoder.py (a
layer and the whole graph), spec.py (what a family says), families/ (one file per family).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import FALLBACK, BuilderError, UnsupportedArchitecture, WeightError
from .spec import DecoderSpec
from .weights import SafetensorsSource


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of a Hugging Face folder (the text config of a multimodal one)."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BuilderError(f"{path}: not a readable config.json ({e}); {FALLBACK}") from e
    if "text_config" in config and "model_type" not in config.get("text_config", {}):
        raise BuilderError(f"{path}: a multimodal config without a text model_type; {FALLBACK}")
    return config.get("text_config", config) if "text_config" in config else config


def known_model_types() -> list[str]:
    from .families import registry

    return sorted(registry())


def supports(config: dict[str, Any]) -> bool:
    from .families import registry

    return config.get("model_type") in registry()


def plan(folder: Path) -> DecoderSpec:
    """The DecoderSpec of a folder's config.json, or UnsupportedArchitecture naming the fallback."""
    from .families import registry

    config = read_config(folder)
    family = registry().get(config.get("model_type"))
    if family is None:
        raise UnsupportedArchitecture(str(config.get("model_type")), list(registry()))
    return family.spec(config)


def _lm_head_name(spec: DecoderSpec, source: SafetensorsSource) -> str:
    """The family's output embedding, or the input embedding when the checkpoint has no separate head."""
    return spec.lm_head if spec.lm_head in source else spec.embed


def build_backbone(folder: Path, onnx_path: Path, *, spec: DecoderSpec | None = None, opset: int = 18,
                   log=print, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write `onnx_path` (+ `.data`) for the model in `folder`; returns the geometry (onnx_export's keys)."""
    from .decoder import write_backbone

    spec = spec or plan(folder)
    return write_backbone(spec, SafetensorsSource(folder), onnx_path, opset=opset, log=log, progress=progress)


def write_lm_head(folder: Path, path: Path, *, spec: DecoderSpec | None = None) -> tuple[int, int]:
    """lm_head.npy, (vocab, hidden) float32, from the source's output embedding; returns its shape."""
    spec = spec or plan(folder)
    source = SafetensorsSource(folder)
    name = _lm_head_name(spec, source)
    head = source.get(name, (spec.vocab_size, spec.hidden_size))
    np.save(path, head)
    return tuple(head.shape)


__all__ = ["BuilderError", "DecoderSpec", "UnsupportedArchitecture", "WeightError", "build_backbone",
           "known_model_types", "plan", "read_config", "supports", "write_lm_head"]
