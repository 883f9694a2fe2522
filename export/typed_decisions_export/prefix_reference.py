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
prefix only, once: a few layers and len(ids) embedding rows, never the whole float model (issue
#32: each tensor goes into the model's parameter as it is read, and only the rows `ids` of the
embedding and LM head are read).
"""

from __future__ import annotations

from collections.abc import Iterator
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


def _from_folder(path: Path, names: list[str], ids: list[int]) -> Iterator[tuple[str, np.ndarray]]:
    """(name, float32 array) of each of `names` found in the folder's safetensors files, one at a time;
    of the embedding and LM head only the rows `ids` are read (safetensors' own slices). Each tensor
    is read with its file opened for it alone: safetensors maps the file, and the pages a read
    touches stay resident until it is closed (issue #32: 3 GB of the first shard at 7B)."""
    import torch
    from safetensors import safe_open

    where: dict[str, Path] = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            where.update((name, file) for name in f.keys() if name in names)
    for name in names:
        if name not in where:
            continue
        with safe_open(str(where[name]), framework="pt") as f:
            if name in EMBED_KEYS:
                table = f.get_slice(name)
                t = torch.cat([table[i:i + 1] for i in ids])
            else:
                t = f.get_tensor(name)
            yield name, t.float().numpy()


def _from_gguf(path: Path, config: Any, layers: int, model: Any, ids: list[int],
               reader: Any = None) -> Iterator[tuple[str, np.ndarray]]:
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
    for t in reader.tensors:
        if t.name not in mapping:
            continue
        name = mapping[t.name]
        data = t.data[ids] if name in EMBED_KEYS else t.data  # rows of a 2-D tensor are rows of bytes
        w = processor.process(weights=dequantize(data, t.tensor_type), name=t.name).weights
        yield name, np.asarray(w, dtype=np.float32)


def prefix_model(kind: str, path: Path, config: Any, layers: int, ids: list[int], *, reader: Any = None) -> Any:
    """transformers' causal LM of the first `layers` layers and the vocabulary `ids`, float32, eval.
    `reader`: an open gguf GGUFReader of `path` (parsing a big vocabulary's metadata takes seconds).

    Memory: the model is built once and each source tensor is copied into its parameter as it is
    read, then dropped, so the prefix is held once (plus one tensor), never as a second dict of
    arrays beside the model."""
    import torch
    from transformers import AutoModelForCausalLM

    small = prefix_config(config, layers, len(ids))
    model = AutoModelForCausalLM.from_config(small, dtype=torch.float32, attn_implementation="sdpa")
    tied = bool(getattr(small, "tie_word_embeddings", False))
    params = model.state_dict()  # name -> the parameter's own tensor (no copies)
    names = [n for n in params if not (tied and n == "lm_head.weight")]
    found = set()
    tensors = _from_folder(path, names, ids) if kind == "hf_folder" else _from_gguf(path, config, layers, model, ids, reader)
    with torch.no_grad():
        for name, value in tensors:
            if name not in params or (tied and name == "lm_head.weight"):
                continue
            target = params[name]
            if tuple(value.shape) != tuple(target.shape):
                raise SelfCheckError(f"{path}: the reference's {name} has shape {list(value.shape)}, the prefix "
                                     f"model's {list(target.shape)}")
            target.copy_(torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)))
            found.add(name)
            del value
    if not tied and "lm_head.weight" in params and "lm_head.weight" not in found:
        raise SelfCheckError(f"{path}: the reference found no lm_head.weight and the config does not tie it")
    missing = [n for n in names if n not in found]
    if missing:
        raise SelfCheckError(f"{path}: the self-check's reference found no tensor for {missing[:5]}")
    if tied:
        model.tie_weights()
    return model.eval()
