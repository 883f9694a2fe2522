"""Resolve an export source and load it with transformers, in float32 and without the network.

A source is one of
- a Hugging Face model folder (config.json, weights, tokenizer files),
- a `.gguf` file (transformers dequantizes it; its tokenizer is rebuilt from the GGUF metadata,
  which takes 10-30 s for a 150k vocabulary, so it is built once here and saved by the caller),
- a catalogue name such as `tiny` or `qwen2.5-coder-1.5b`, resolved by
  `typed_decisions.models.pull(name)` to the path of a GGUF file it caches.

`source_identity` hashes what was loaded so that a manifest says exactly which weights it holds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typed_decisions.artifacts import sha256_file

from .errors import ExportError

_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth")


@dataclass
class LoadedModel:
    """A loaded causal LM, its tokenizer, and where it came from (the manifest's `source`)."""

    model: Any  # transformers PreTrainedModel with an LM head, float32, eval mode
    tokenizer: Any  # transformers fast tokenizer
    source: dict[str, Any]  # kind, path, sha256, catalogue_name
    default_name: str


def folder_weights_sha256(folder: Path) -> str:
    """One digest for a model folder's weight files: the sha256 of their `sha256sum` listing.

    The listing is `"<sha256>  <relative path>\\n"` per weight file, sorted by path, so the digest
    changes when any weight file changes, appears or disappears, and not when a README does.
    """
    files = sorted({p for pat in _WEIGHT_PATTERNS for p in folder.rglob(pat) if p.is_file()})
    if not files:
        raise ExportError(f"{folder}: no weight files ({', '.join(_WEIGHT_PATTERNS)}) found")
    listing = "".join(f"{sha256_file(p)}  {p.relative_to(folder).as_posix()}\n" for p in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def resolve_source(source: str | Path) -> tuple[str, Path, str | None]:
    """Return (kind, path, catalogue_name) for a source; kind is "hf_folder" or "gguf".

    >>> resolve_source("models/SmolLM2.gguf")  # doctest: +SKIP
    ('gguf', PosixPath('models/SmolLM2.gguf'), None)
    """
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ExportError(f"{path} is a folder without config.json; pass a Hugging Face model folder or a .gguf file")
        return "hf_folder", path.resolve(), None
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ExportError(f"{path}: a file source must be a .gguf file")
        return "gguf", path.resolve(), None
    name = str(source)
    if "/" in name or "\\" in name or name.lower().endswith(".gguf"):
        raise ExportError(f"{name}: no such file or folder")
    try:
        from typed_decisions import models
    except ImportError as e:  # the runtime is a declared dependency; say what is missing
        raise ExportError(
            f"{name!r} is not a path, and catalogue names need typed_decisions.models "
            f"(pip install typed-decisions-runtime): {e}"
        ) from e
    try:
        pulled = Path(models.pull(name))
    except Exception as e:  # unknown name, failed download: keep the catalogue's message
        raise ExportError(f"catalogue model {name!r}: {e}") from e
    return "gguf", pulled.resolve(), name


def load_tokenizer(kind: str, path: Path, *, log=print) -> Any:
    """The fast (tokenizers-backed) transformers tokenizer of a resolved source, offline."""
    from transformers import AutoTokenizer

    where, kwargs = (path.parent, {"gguf_file": path.name}) if kind == "gguf" else (path, {})
    log("loading tokenizer ..." + (" (built from GGUF metadata: slow)" if kind == "gguf" else ""))
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True, **kwargs)
    except Exception as e:
        raise ExportError(f"{path}: could not load a tokenizer: {e}") from e
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ExportError(f"{path}: only fast (tokenizers-backed) tokenizers can be exported, got {type(tokenizer).__name__}")
    return tokenizer


def load_model(kind: str, path: Path, *, log=print) -> Any:
    """The causal LM (with its LM head) of a resolved source, float32, sdpa attention, eval mode, offline."""
    import torch
    from transformers import AutoModelForCausalLM

    where, kwargs = (path.parent, {"gguf_file": path.name}) if kind == "gguf" else (path, {})
    log("loading model weights (float32) ...")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, local_files_only=True, dtype=torch.float32, attn_implementation="sdpa", **kwargs
        )
    except Exception as e:
        raise ExportError(f"{path}: could not load a causal LM: {e}") from e
    return model.eval()


def source_facts(kind: str, path: Path, catalogue_name: str | None, *, log=print) -> tuple[dict[str, Any], str]:
    """(the manifest's `source`, the default model name) of a resolved source; hashes its weights."""
    log(f"hashing source {path} ...")
    digest = sha256_file(path) if kind == "gguf" else folder_weights_sha256(path)
    default_name = (catalogue_name or path.stem) if kind == "gguf" else path.name
    return {"kind": kind, "path": str(path), "sha256": digest, "catalogue_name": catalogue_name}, default_name


def load_source(source: str | Path, *, log=print, progress: bool = True,
                resolved: tuple[str, Path, str | None] | None = None) -> LoadedModel:
    """Load the model (with its LM head) and tokenizer of a source, float32, sdpa attention, offline.
    `resolved` is `resolve_source(source)` when the caller already has it."""
    from transformers.utils import logging as hf_logging

    if not progress:
        hf_logging.disable_progress_bar()  # GGUF de-quantization and weight-loading bars

    kind, path, catalogue_name = resolved or resolve_source(source)
    source_info, default_name = source_facts(kind, path, catalogue_name, log=log)
    tokenizer = load_tokenizer(kind, path, log=log)
    model = load_model(kind, path, log=log)
    return LoadedModel(model=model, tokenizer=tokenizer, source=source_info, default_name=default_name)
