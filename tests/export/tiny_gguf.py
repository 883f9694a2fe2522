"""Tiny GGUF files for the builder's GGUF tests, written with the gguf package from a tiny folder.

`write_gguf(folder, path)` turns a tiny Hugging Face folder (tiny_models.py) into a GGUF file the
way llama.cpp's converter (convert_hf_to_gguf.py) lays one out: the architecture's metadata keys,
the byte-level BPE's tokens and merges with the ChatML template (llama.cpp's `_set_vocab_gpt2`, which
its Gemma 3 and Phi-3 converters also use for a folder with no tokenizer.model), tensors under
gguf's names, 2-D weights quantized (Q8_0, Q4_1 and F16 in turn, so each de-quantizer is read), 1-D
ones in F32, and what the converter changes per architecture (the reader must undo it):
- `llama` (LlamaModel): q/k rows permuted for llama.cpp's RoPE; `vocab_size` and
  `rope.dimension_count` written;
- `gemma3` (Gemma3Model): every `*norm.weight` stored as w + 1; head_dim as `attention.key_length`
  and `value_length`, the window, the full-attention RoPE base and the final logit soft-cap written;
- `phi3` (Phi3MiniModel): fused qkv_proj / gate_up_proj kept as they are (`attn_qkv`, `ffn_up`);
  `rope.dimension_count`, `rope.scaling.original_context_length` and the window (0 for none) written.
The model's vocabulary must equal the tokenizer's (only `llama` files carry a vocab_size:
transformers counts the tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

QTYPES = ("Q8_0", "Q4_1", "F16")
GGUF_ARCH = {"gemma3_text": "gemma3"}  # config.json's model_type -> llama.cpp's architecture, where they differ


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute, verbatim in numpy."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(folder: Path, path: Path) -> Path:
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    arch = GGUF_ARCH.get(config["model_type"], config["model_type"])
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
    rope = config.get("rope_parameters") or {}
    rope = rope.get("full_attention", rope)  # llama.cpp: Gemma 3's global layers' base
    w.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    head_dim = config.get("head_dim") or config["hidden_size"] // h
    if arch == "llama":
        w.add_vocab_size(len(tokens))
        w.add_rope_dimension_count(head_dim)
    if arch == "gemma3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        if config.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
        w.add_sliding_window(config["sliding_window"])
    if arch == "phi3":
        w.add_rope_scaling_orig_ctx_len(config.get("original_max_position_embeddings") or config["max_position_embeddings"])
        w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 1.0) * config["hidden_size"]) // h)
        w.add_sliding_window(config.get("sliding_window") or 0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch == "qwen2" else "smollm")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(added["<|im_end|>"])
    w.add_pad_token_id(added["<|endoftext|>"])
    if "<s>" in added and arch in ("llama", "gemma3"):  # tiny_models.ADD_BOS
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
        if arch == "gemma3" and hf.endswith("norm.weight"):  # Gemma3Model.norm_shift
            value = value + np.float32(1.0)
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


def untie_gguf(src: Path, dst: Path) -> np.ndarray:
    """Copy a tied GGUF adding `output.weight` = -token_embd (float16): an LM head that is not the
    embedding. Returns that head, (vocab, hidden)."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    assert all(t.name != "output.weight" for t in reader.tensors), f"{src} is untied already"
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    head = (-gguf.quants.dequantize(embd.data, embd.tensor_type)).astype(np.float16)  # (V, H)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.add_tensor_info("output.weight", head.shape, head.dtype, head.nbytes, gguf.GGMLQuantizationType.F16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.write_tensor_data(head)
    writer.close()
    return head
