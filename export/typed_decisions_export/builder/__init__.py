"""The graph builder: the backbone ONNX graph written with the ONNX helper API from config.json,
the weights streamed tensor by tensor from safetensors into the external-data file, no torch model.

It writes the interface the traced export writes (onnx_export.py, docs/FORMAT.md), so the runtime
and the self-check treat both alike; the traced path stays the fallback for every model_type no
family file knows, and the oracle of the builder's tests (tests/export/test_builder.py).

    spec = plan(folder)                       # families/<family>.py reads config.json
    geometry = build_backbone(folder, out / "model.onnx")
    write_lm_head(folder, out / "lm_head.npy")

A GGUF file is a source too: `open_source("gguf", path)` reads its metadata into the same config
dict (gguf_config.py) and de-quantizes its tensors one at a time (gguf_weights.py); `plan_source`
and the functions above take that Source wherever they take a folder.

Layout: errors.py, rope.py (inverse frequencies), weights.py (safetensors, one tensor at a time),
gguf_config.py and gguf_weights.py (GGUF metadata and tensors),
graph.py (the writer, external data), disk.py (the bytes an export writes, checked before writing), ops.py (norm, RoPE, attention, MLP, masks), decoder.py (a
layer and the whole graph), spec.py (what a family says), families/ (one file per family).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    return spec_of(read_config(folder))


@dataclass
class Source:
    """A model source the builder reads: its config dict (config.json's keys), the transformers config
    object of the same facts (the manifest and the self-check's reference use it), and its tensors."""

    kind: str  # "hf_folder" or "gguf"
    path: Path
    config: dict[str, Any]
    tensors: Any  # SafetensorsSource or GGUFSource
    _hf_config: Any = None

    def transformers_config(self) -> Any:
        if self._hf_config is None:
            from transformers import AutoConfig

            self._hf_config = AutoConfig.from_pretrained(self.path, local_files_only=True)
        return self._hf_config


def open_source(kind: str, path: Path) -> Source:
    """The Source of a Hugging Face folder (config.json + safetensors) or a GGUF file."""
    path = Path(path)
    if kind == "hf_folder":
        return Source(kind, path, read_config(path), SafetensorsSource(path))
    if kind == "gguf":
        from .gguf_config import config_dict, transformers_config
        from .gguf_reader import open_reader
        from .gguf_weights import GGUFSource

        reader = open_reader(path)
        hf_config = transformers_config(reader)
        config = config_dict(hf_config)
        return Source(kind, path, config, GGUFSource(reader, config), hf_config)
    raise BuilderError(f"{path}: the graph builder reads Hugging Face folders and GGUF files, not {kind!r}; {FALLBACK}")


def spec_of(config: dict[str, Any]) -> DecoderSpec:
    """The family's DecoderSpec of a config dict, or UnsupportedArchitecture naming the fallback."""
    from .families import registry

    family = registry().get(config.get("model_type"))
    if family is None:
        raise UnsupportedArchitecture(str(config.get("model_type")), list(registry()))
    return family.spec(config)


def plan_source(kind: str, path: Path) -> tuple[DecoderSpec, Source]:
    """(DecoderSpec, Source) of a resolved source; the architecture is checked before any tensor."""
    if kind == "hf_folder":
        spec = plan(path)
        return spec, open_source(kind, path)
    source = open_source(kind, path)
    return spec_of(source.config), source


def _tensors(source: Any) -> Any:
    """The tensor reader of a folder path or a Source."""
    return source.tensors if isinstance(source, Source) else SafetensorsSource(source)


def _lm_head_name(spec: DecoderSpec, source: Any) -> str:
    """The family's output embedding, or the input embedding when the checkpoint has no separate head."""
    return spec.lm_head if spec.lm_head in source else spec.embed


def build_backbone(folder: Path | Source, onnx_path: Path, *, spec: DecoderSpec | None = None, opset: int = 18,
                   log=print, progress: Callable[[str], None] | None = None,
                   make_writer: Callable[..., Any] | None = None,
                   hidden_layers: str | Sequence[int] = "auto") -> dict[str, Any]:
    """Write `onnx_path` (+ `.data`) for the model in `folder` (a Hugging Face folder or a Source);
    returns the geometry (onnx_export's keys). `make_writer`: decoder.write_backbone's (the INT8
    writer of int8/direct_writer.py); `hidden_layers`: the mid-layer outputs
    (decoder.hidden_layer_set: "auto" is n // 2 and 2n // 3)."""
    from .decoder import write_backbone
    from .graph import GraphWriter

    spec = spec or (spec_of(folder.config) if isinstance(folder, Source) else plan(folder))
    return write_backbone(spec, _tensors(folder), onnx_path, opset=opset, log=log, progress=progress,
                          make_writer=make_writer or GraphWriter, hidden_layers=hidden_layers)


def write_lm_head(folder: Path | Source, path: Path, *, spec: DecoderSpec | None = None) -> tuple[int, int]:
    """lm_head.npy, (vocab, hidden) float32, from the source's output embedding; returns its shape.
    Streamed a block of rows at a time (issue #32: the whole head is 2.2 GB of float32 at 7B)."""
    spec = spec or (spec_of(folder.config) if isinstance(folder, Source) else plan(folder))
    from .decoder import row_blocks

    source = _tensors(folder)
    name = _lm_head_name(spec, source)
    shape = (spec.vocab_size, spec.hidden_size)
    with open(path, "wb") as f:  # np.save's format, written a block of rows at a time (never (V, H) at once)
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                 "fortran_order": False, "shape": shape})
        rows = 0
        for block in row_blocks(source, name, shape):
            f.write(memoryview(np.ascontiguousarray(block, dtype=np.float32)).cast("B"))
            rows += block.shape[0]
    if rows != shape[0]:
        raise WeightError(f"{name}: {rows} rows read for lm_head.npy, {shape[0]} expected")
    return shape


__all__ = ["BuilderError", "DecoderSpec", "Source", "UnsupportedArchitecture", "WeightError", "build_backbone",
           "known_model_types", "open_source", "plan", "plan_source", "read_config", "spec_of", "supports",
           "write_lm_head"]
