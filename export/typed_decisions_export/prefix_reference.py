"""The bounded self-check's oracle: transformers on a prefix of the model, loaded by transformers' rules.

`prefix_model(kind, path, config, layers, ids)` builds the transformers causal LM of `config` cut to
its first `layers` decoder layers (the final norm and LM head kept) and to a vocabulary of the rows
`ids` of the embedding and of the LM head (token `ids[j]` becomes token j), and fills it with the
source's tensors, read independently of the graph builder:

- a Hugging Face folder: each parameter by its own name from the safetensors files;
- a GGUF file: transformers' own GGUF loader pieces, its name table
  (`get_gguf_hf_weights_map`) and its tensor processors (llama's q/k un-permutation), on tensors
  de-quantized by `gguf.quants.dequantize` (which transformers also calls).

So a builder that names, permutes or reads a tensor wrongly disagrees with this model. It holds the
prefix only: a few layers and len(ids) embedding rows, never the whole float model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .errors import SelfCheckError

EMBED_KEYS = ("model.embed_tokens.weight", "lm_head.weight")  # rows sliced to the prefix vocabulary


def prefix_config(config: Any, layers: int, vocab: int) -> Any:
    """A copy of a transformers config with `layers` decoder layers and `vocab` tokens."""
    d = config.to_dict()
    d.update(num_hidden_layers=layers, vocab_size=vocab, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    if d.get("layer_types"):
        d["layer_types"] = list(d["layer_types"])[:layers]
    if d.get("max_window_layers") is not None:  # Qwen2: a window only from this layer on
        d["max_window_layers"] = min(int(d["max_window_layers"]), layers)
    return type(config).from_dict(d)


def _from_folder(path: Path, names: list[str], ids: list[int]) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    out: dict[str, np.ndarray] = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in names:
                if name in f.keys():
                    t = f.get_tensor(name).float()
                    out[name] = (t[ids] if name in EMBED_KEYS else t).numpy()
    return out


def _from_gguf(path: Path, config: Any, layers: int, model: Any, ids: list[int], reader: Any = None) -> dict[str, np.ndarray]:
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        read_field,
    )

    reader = reader if reader is not None else GGUFReader(str(path))
    arch = read_field(reader, "general.architecture")[0]
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config.to_dict())
    mapping = get_gguf_hf_weights_map(model, processor, model_type=arch, num_layers=layers)
    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.name not in mapping:
            continue
        name = mapping[t.name]
        data = t.data[ids] if name in EMBED_KEYS else t.data  # rows of a 2-D tensor are rows of bytes
        w = processor.process(weights=dequantize(data, t.tensor_type), name=t.name).weights
        out[name] = np.asarray(w, dtype=np.float32)
    return out


def prefix_model(kind: str, path: Path, config: Any, layers: int, ids: list[int], *, reader: Any = None) -> Any:
    """transformers' causal LM of the first `layers` layers and the vocabulary `ids`, float32, eval.
    `reader`: an open gguf GGUFReader of `path` (parsing a big vocabulary's metadata takes seconds)."""
    import torch
    from transformers import AutoModelForCausalLM

    small = prefix_config(config, layers, len(ids))
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(small)
    names = list(skeleton.state_dict())
    tensors = _from_folder(path, names, ids) if kind == "hf_folder" else _from_gguf(path, config, layers, skeleton, ids, reader)
    tied = bool(getattr(small, "tie_word_embeddings", False))
    if tied or "lm_head.weight" not in tensors:
        tensors.pop("lm_head.weight", None)
        if not tied:
            raise SelfCheckError(f"{path}: the reference found no lm_head.weight and the config does not tie it")
    missing = [n for n in names if n not in tensors and not (tied and n == "lm_head.weight")]
    if missing:
        raise SelfCheckError(f"{path}: the self-check's reference found no tensor for {missing[:5]}")
    model = AutoModelForCausalLM.from_config(small, dtype=torch.float32, attn_implementation="sdpa")
    model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in tensors.items()}, strict=False)
    if tied:
        model.tie_weights()
    return model.eval()
