"""GGUF metadata -> the config dict a family file reads, the way transformers builds it.

transformers (`modeling_gguf_pytorch_utils.load_gguf_checkpoint`, the table in
`integrations/ggml.py`) renames a few `<arch>.*` keys to config attributes, sets
`tie_word_embeddings` when the file has no `output.weight`, takes `vocab_size` from the token list
when the metadata has none, renames a few architectures' model_type (`gemma3` -> `gemma3_text`), and
leaves everything else to the config class's defaults, even where llama.cpp wrote the fact (a Gemma
3's soft-cap or rope scaling, a Phi-3's rope dimensions: docs/export.md "GGUF sources"). This module
does the same for the architectures the builder reads from GGUF (`KEYS`), with the gguf package's
own reader, and asks transformers' config class only for those defaults (`AutoConfig.for_model`),
so the builder sees the config the traced path sees (tests/export/test_builder_gguf.py holds the
two equal). Other architectures are refused with the fallback.

The reader (gguf_reader.py) is opened once; the weights (gguf_weights.py) use the same reader.
"""

from __future__ import annotations

from typing import Any

from .errors import FALLBACK, BuilderError
from .gguf_reader import array_length, field, gguf_architecture

# <arch>.<key> -> config attribute, per GGUF architecture (transformers' GGUF_CONFIG_MAPPING rows)
_COMMON = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "vocab_size": "vocab_size",
}
KEYS: dict[str, dict[str, str]] = {
    "llama": {**_COMMON, "rope.dimension_count": "head_dim"},  # llama.cpp: head_dim == rope dims here
    "qwen2": dict(_COMMON),
    "qwen3": dict(_COMMON),
    # Gemma 3: llama.cpp writes head_dim as attention.key_length; its window is read, its sliding
    # pattern, local RoPE base, query_pre_attn_scalar and final_logit_softcapping are not (the class's
    # defaults: every 6th layer full, 10000, 256, None)
    "gemma3": {**_COMMON, "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window"},
    # Phi-3: rope.dimension_count, attention.sliding_window and the rope factors are not read
    # (partial_rotary_factor 1, no window, no longrope: the class's defaults)
    "phi3": dict(_COMMON),
}
# GGUF architecture -> transformers model_type, where they differ (transformers: a Gemma 3 GGUF holds
# only the text backbone)
MODEL_TYPES = {"gemma3": "gemma3_text"}


def raw_config(reader: Any) -> dict[str, Any]:
    """The config keys the GGUF metadata sets (before the config class adds its defaults)."""
    arch = gguf_architecture(reader)
    if arch not in KEYS:
        raise BuilderError(f"the graph builder does not read {arch!r} GGUF files yet (it reads "
                           f"{', '.join(sorted(KEYS))}); {FALLBACK}")
    model_type = MODEL_TYPES.get(arch, arch)
    if arch == "llama" and "mistral" in [field(reader, "general.name")]:  # transformers' own test, verbatim
        model_type = "mistral"
    config: dict[str, Any] = {"model_type": model_type}
    for key, attr in KEYS[arch].items():
        value = field(reader, f"{arch}.{key}")
        if value is not None:
            config[attr] = value
    names = {t.name for t in reader.tensors}
    config["tie_word_embeddings"] = "output.weight" not in names
    if "vocab_size" not in config:  # transformers: the tokenizer's token count
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise BuilderError("GGUF metadata has neither a vocab_size nor tokenizer.ggml.tokens")
        config["vocab_size"] = array_length(tokens)
    return config


def transformers_config(reader: Any) -> Any:
    """The transformers config object (the class's defaults for every key the metadata leaves out)."""
    from transformers import AutoConfig

    raw = raw_config(reader)
    model_type = raw.pop("model_type")
    return AutoConfig.for_model(model_type, **raw)


def config_dict(config: Any) -> dict[str, Any]:
    """What a family's `spec(config)` reads: the config as a plain dict (config.json's keys)."""
    out = config.to_dict()
    out["model_type"] = config.model_type
    return out
