"""artifacts.py on a hand-built export directory (no ONNX model is loaded, only files checked):
manifest fields, hashes, the verified-stamp side file, and every refusal naming file and fix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from typed_decisions import artifacts
from typed_decisions.artifacts import FORMAT_VERSION, load_artifacts, sha256_file
from typed_decisions.errors import ArtifactError

ARCH = {"model_type": "llama", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4, "hidden_size": 8,
        "vocab_size": 5, "max_position_embeddings": 64, "not_an_architecture_field": 1}


def make_export(root: Path, **manifest_changes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.onnx").write_bytes(b"not really onnx")
    np.save(root / "lm_head.npy", np.arange(40, dtype=np.float32).reshape(5, 8))
    (root / "tokenizer.json").write_text("{}")
    (root / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}
    manifest = {"format_version": FORMAT_VERSION, "name": "toy", "files": files, "architecture": ARCH,
                "onnx_file": "model.onnx", "lm_head": {"file": "lm_head.npy"},
                "tokenizer": {"file": "tokenizer.json", "chat_template_file": "chat_template.jinja",
                              "eos_token_id": 2}, **manifest_changes}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_sha256_file_in_blocks(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc" * 1000)
    assert sha256_file(p, chunk=7) == hashlib.sha256(b"abc" * 1000).hexdigest()


def test_loads_every_piece(tmp_path):
    art = load_artifacts(make_export(tmp_path / "e"))
    assert art.name == "toy" and art.quantization is None
    assert art.architecture.hidden_size == 8 and art.architecture.logit_scale == 1.0
    assert art.onnx_path == (tmp_path / "e" / "model.onnx").resolve()
    assert art.lm_head.shape == (5, 8) and art.lm_head[1, 0] == 8.0 and isinstance(art.lm_head, np.memmap)
    assert art.chat_template == "{{ messages[0]['content'] }}" and art.tokenizer_info["eos_token_id"] == 2


def test_verified_stamp_skips_rehashing_until_a_file_changes(tmp_path, monkeypatch):
    root = make_export(tmp_path / "e")
    load_artifacts(root)
    assert set(json.loads((root / ".verified.json").read_text())) == {"model.onnx", "lm_head.npy", "tokenizer.json",
                                                                      "chat_template.jinja"}
    hashed = []
    monkeypatch.setattr(artifacts, "sha256_file", lambda p: hashed.append(p.name) or sha256_file(p))
    load_artifacts(root)
    assert hashed == []
    (root / "model.onnx").write_bytes(b"tampered, same stamp no more")
    with pytest.raises(ArtifactError, match="'model.onnx' has sha256 .* modified or corrupted"):
        load_artifacts(root)
    assert hashed == ["model.onnx"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: (r / "manifest.json").unlink(), "not an exported model directory"),
    (lambda r: (r / "manifest.json").write_text("{"), "not valid JSON"),
    (lambda r: _edit(r, format_version=99), "format_version 99 is not supported"),
    (lambda r: _edit(r, files={}), "no 'files' hashes"),
    (lambda r: (r / "tokenizer.json").unlink(), "'tokenizer.json' is listed in manifest.json but missing"),
    (lambda r: _edit(r, onnx_file="other.onnx"), "'other.onnx' is not covered by 'files' hashes"),
])
def test_refusals_name_the_file_and_the_fix(tmp_path, change, message):
    root = make_export(tmp_path / "e")
    change(root)
    with pytest.raises(ArtifactError, match=message):
        load_artifacts(root)


def test_lm_head_must_match_hidden_size(tmp_path):
    root = make_export(tmp_path / "e")
    _edit(root, architecture={**ARCH, "hidden_size": 16})
    with pytest.raises(ArtifactError, match=r"shape \(5, 8\) does not match hidden_size 16"):
        load_artifacts(root)


def _edit(root: Path, **changes) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, **changes}))
