"""The tiny REAL model: SmolLM2-135M-Instruct (Q4_1 GGUF, llama, 30 layers) from the catalogue.

Its float32 export is cached on disk (conftest.smollm2_export), so after the first run these tests
take seconds. A GGUF whose `output.weight` differs from `token_embd.weight` is checked on a tiny
file (test_builder_gguf.py).
"""

from __future__ import annotations

import hashlib

import pytest

from typed_decisions_export.loading import resolve_source
from typed_decisions_export.selfcheck import TOLERANCES


def test_catalogue_name_resolves_through_pull(smollm2_gguf):
    kind, path, name = resolve_source("tiny")
    assert (kind, path, name) == ("gguf", smollm2_gguf.resolve(), "tiny")


def test_smollm2_export_manifest(smollm2_export):
    from typed_decisions.models import resolve

    out, manifest = smollm2_export
    check = manifest["self_check"]
    assert check["passed"], check["failures"]
    for name in ("prefill", "left_padded_batch", "cached_step_1", "cached_step_3", "right_padded_suffixes"):
        for key in ("hidden_rel", "logits_rel", "prob_abs"):
            assert check["results"][name][key] <= TOLERANCES[key]
    assert check["results"]["tokenizer"]["mismatches"] == 0

    assert manifest["source"]["kind"] == "gguf"
    assert manifest["source"]["sha256"] == resolve("tiny").sha256
    assert manifest["architecture"] == {
        "model_type": "llama", "num_layers": 30, "num_attention_heads": 9, "num_kv_heads": 3, "head_dim": 64,
        "hidden_size": 576, "vocab_size": 49152, "sliding_window": None, "final_logit_softcapping": None,
        "logit_scale": 1.0, "max_position_embeddings": 8192,
    }
    tok = manifest["tokenizer"]
    assert tok["add_bos_token"] is False  # SmolLM2's template writes <|im_start|> itself
    assert (tok["eos_token"], tok["eos_token_id"]) == ("<|im_end|>", 2)
    assert tok["special_tokens"]["<|im_start|>"] == 1 and tok["special_tokens"]["<|im_end|>"] == 2
    assert (out / "chat_template.jinja").read_text().startswith("{% for message in messages %}")
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name


def test_runtime_loads_smollm2_export(smollm2_export):
    from typed_decisions.artifacts import load_artifacts

    out, manifest = smollm2_export
    art = load_artifacts(out)
    assert art.onnx_path.name == "model.onnx"
    assert art.lm_head.shape == (49152, 576)
    assert art.chat_template is not None and "<|im_start|>" in art.chat_template


@pytest.mark.parametrize("text", ["Is the sky blue?", "déjà vu — 日本語 🙂", "  two  spaces\tand tab"])
def test_tokenizer_json_matches_transformers(smollm2_export, smollm2_gguf, text):
    """The Rust tokenizer the runtime loads gives transformers' ids (plain text and chat markers)."""
    from tokenizers import Tokenizer

    out, manifest = smollm2_export
    rust = Tokenizer.from_file(str(out / "tokenizer.json"))
    hf = _hf_tokenizer(smollm2_gguf)
    chat = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    for t in (text, chat):
        assert rust.encode(t, add_special_tokens=False).ids == hf(t, add_special_tokens=False).input_ids
    assert rust.encode(chat, add_special_tokens=False).ids[0] == manifest["tokenizer"]["special_tokens"]["<|im_start|>"]


_HF_TOKENIZERS: dict = {}


def _hf_tokenizer(gguf_path):
    """transformers' tokenizer built from the GGUF (slow: built once per session)."""
    from transformers import AutoTokenizer

    if gguf_path not in _HF_TOKENIZERS:
        _HF_TOKENIZERS[gguf_path] = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    return _HF_TOKENIZERS[gguf_path]
