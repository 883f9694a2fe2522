"""Load and verify an exported model directory (the format in docs/FORMAT.md).

This is the runtime's side of the export contract: read ``manifest.json``, check that every listed
file is present and unchanged (sha256), and hand out the pieces the engine needs — the ONNX path,
the memory-mapped LM-head rows, the tokenizer and the chat template. Hashing a multi-GB fp32 model
takes seconds, so a verified ``(size, mtime_ns, sha256)`` stamp per file is kept in a side file;
a file whose size or mtime changed is re-hashed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ArtifactError
from .quantized import graph_file, rows_independent

FORMAT_VERSION = 2  # the newest this runtime reads; 1 differs only in a 2-D attention_mask
SUPPORTED_FORMAT_VERSIONS = (1, 2)
_STAMP_FILE = ".verified.json"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Architecture:
    model_type: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int | None = None
    sliding_window: int | None = None
    final_logit_softcapping: float | None = None
    logit_scale: float = 1.0
    max_position_embeddings: int | None = None


@dataclass
class Artifacts:
    """Everything the engine and compiler need from one exported directory."""

    root: Path
    manifest: dict[str, Any]
    architecture: Architecture
    onnx_path: Path
    lm_head: np.ndarray  # (vocab, hidden), memory-mapped
    tokenizer_path: Path
    chat_template: str | None
    tokenizer_info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.root.name)

    @property
    def quantization(self) -> dict[str, Any] | None:
        return self.manifest.get("quantization")

    @property
    def graph_path(self) -> Path:
        """The graph this CPU runs: ``onnx_path``, or for an INT8 export with 8-bit weights on a CPU
        without VNNI/AMX its u8·u8 twin (quantized.graph_file)."""
        rel = graph_file(self.quantization)
        return self.root / rel if rel else self.onnx_path

    @property
    def rows_independent(self) -> bool:
        """Whether a row's result is independent of the other rows of a run, so rows may be
        batched (quantized.rows_independent)."""
        return rows_independent(self)


def _verify_files(root: Path, files: dict[str, str]) -> None:
    stamp_path = root / _STAMP_FILE
    try:
        stamps = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        stamps = {}
    changed = False
    for rel, expected in sorted(files.items()):
        path = root / rel
        if not path.is_file():
            raise ArtifactError(f"{root}: '{rel}' is listed in manifest.json but missing; "
                                "re-run the export")
        st = path.stat()
        key = [st.st_size, st.st_mtime_ns, expected]
        if stamps.get(rel) == key:
            continue
        actual = sha256_file(path)
        if actual != expected:
            raise ArtifactError(f"{root}: '{rel}' has sha256 {actual}, manifest.json says "
                                f"{expected}: the file was modified or corrupted after export; "
                                "re-run the export")
        stamps[rel] = key
        changed = True
    if changed:
        try:
            stamp_path.write_text(json.dumps(stamps))
        except OSError:
            pass  # read-only deployment: verify again next time


def load_artifacts(root: str | Path, *, verify: bool = True) -> Artifacts:
    """Read ``root/manifest.json``, verify the hashes, and memory-map the LM head.

    Raises ``ArtifactError`` naming the file and the fix when anything is missing or modified.
    """
    root = Path(root).expanduser().resolve()
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise ArtifactError(f"{root} is not an exported model directory (no manifest.json). "
                            "Create one with: typed-decisions export SOURCE --out DIR")
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as e:
        raise ArtifactError(f"{manifest_path} is not valid JSON: {e}") from e
    if manifest.get("format_version") not in SUPPORTED_FORMAT_VERSIONS:
        raise ArtifactError(f"{manifest_path}: format_version {manifest.get('format_version')!r} "
                            f"is not supported (this runtime reads {SUPPORTED_FORMAT_VERSIONS}); re-export")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ArtifactError(f"{manifest_path}: no 'files' hashes; re-run the export")
    if verify:
        _verify_files(root, files)

    arch_fields = set(Architecture.__dataclass_fields__)
    arch = Architecture(**{k: v for k, v in manifest["architecture"].items() if k in arch_fields})
    tok = manifest.get("tokenizer", {})
    onnx_rel = manifest.get("onnx_file", "model.onnx")
    head = manifest.get("lm_head", {"file": "lm_head.npy"})
    graphs = list(((manifest.get("quantization") or {}).get("graphs") or {}).values())
    for rel in (onnx_rel, *graphs, head["file"], tok.get("file", "tokenizer.json")):
        if rel not in files:
            raise ArtifactError(f"{manifest_path}: '{rel}' is not covered by 'files' hashes")
    lm_head = np.load(root / head["file"], mmap_mode="r")
    if lm_head.ndim != 2 or lm_head.shape[1] != arch.hidden_size:
        raise ArtifactError(f"{root / head['file']}: shape {lm_head.shape} does not match "
                            f"hidden_size {arch.hidden_size}")
    template_rel = tok.get("chat_template_file")
    chat_template = (root / template_rel).read_text() if template_rel else None
    return Artifacts(root=root, manifest=manifest, architecture=arch, onnx_path=root / onnx_rel,
                     lm_head=lm_head, tokenizer_path=root / tok.get("file", "tokenizer.json"),
                     chat_template=chat_template, tokenizer_info=tok)


__all__ = ["Architecture", "Artifacts", "FORMAT_VERSION", "load_artifacts", "sha256_file"]
