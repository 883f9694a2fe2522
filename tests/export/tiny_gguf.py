"""Tiny GGUF files for the builder's GGUF tests, written with the gguf package from a tiny folder.

`write_gguf(folder, path)` turns a tiny Hugging Face folder (tiny_models.py) into a GGUF file the
way llama.cpp's converter lays one out: the architecture's metadata keys, the byte-level BPE's
tokens and merges with the ChatML template, tensors under gguf's names, 2-D weights quantized (Q8_0,
Q4_1 and F16 in turn, so each de-quantizer is read), 1-D ones in F32, and for `llama` the q/k rows
permuted as llama.cpp permutes them (the reader must undo it). The model's vocabulary must equal the
tokenizer's (GGUF qwen2 files carry no vocab_size: transformers counts the tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

QTYPES = ("Q8_0", "Q4_1", "F16")


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute, verbatim in numpy."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(folder: Path, path: Path) -> Path:
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    arch = config["model_type"]
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    added = {a["content"]: a["id"] for a in tok["added_tokens"]}
    for content, i in added.items():
        assert tokens[i] == content
    assert len(tokens) == config["vocab_size"], (len(tokens), config["vocab_size"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]

    w = gguf.GGUFWriter(str(path), arch)
    h, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(h)
    w.add_head_count_kv(kv)
    rope = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0))
    w.add_rope_freq_base(float(rope))
    w.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    if arch == "llama":
        w.add_vocab_size(len(tokens))
        w.add_rope_dimension_count(config["hidden_size"] // h)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch == "qwen2" else "smollm")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(added["<|im_end|>"])
    w.add_pad_token_id(added["<|endoftext|>"])
    if arch == "llama":
        w.add_bos_token_id(added["<s>"])
        w.add_add_bos_token(True)
    else:
        w.add_add_bos_token(False)
    from tiny_models import CHATML

    w.add_chat_template(CHATML)

    names = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch),
                                     config["num_hidden_layers"])
    state = load_file(str(folder / "model.safetensors"))
    for i, (hf, value) in enumerate(sorted(state.items())):
        base, _, suffix = hf.rpartition(".")
        name = f"{names.get_name(base)}.{suffix}"
        value = value.astype(np.float32)
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            value = _permute(value, h if ".attn_q." in name else kv)
        if value.ndim == 1:
            w.add_tensor(name, value)
            continue
        qtype = gguf.GGMLQuantizationType[QTYPES[i % len(QTYPES)]]
        if qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, value.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(value, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
