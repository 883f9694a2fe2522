"""Weights from a GGUF file, one tensor at a time, de-quantized to float32 by the gguf package.

`GGUFSource(reader, config)` answers the same questions as SafetensorsSource (`get(name, expect)`,
`in`, `shape`) under the Hugging Face tensor names the family files use; it maps them to GGUF names
with gguf's own table (`get_tensor_name_map`, which transformers inverts for the same purpose). Each
`get` reads the tensor's bytes from the file (a plain read: nothing of the file stays mapped in
memory) and de-quantizes them with `gguf.quants.dequantize` a block of rows at a time into one
float32 array, so the largest transient is that array plus one block of rows.

What llama.cpp's converter changed, undone as transformers undoes it (`TENSOR_PROCESSORS` in
`modeling_gguf_pytorch_utils.py`, which reads these architectures):
- `llama` GGUFs (Llama, Mistral, SmolLM) store q and k with each head's rows interleaved for
  llama.cpp's RoPE: `permute(w, n_head) = w.reshape(n_head, 2, d/2, ...).swapaxes(1, 2)`; `unpermute`
  is its inverse (k with the KV head count);
- `gemma3` GGUFs store every RMSNorm weight as `w + 1` (llama.cpp's Gemma norm multiplies by the
  weight, Gemma3RMSNorm by 1 + w): transformers' Gemma2TensorProcessor subtracts 1 from each tensor
  whose GGUF name holds `norm.weight`, in float32, and so does `get`;
- `phi3` GGUFs keep Phi-3's fused `qkv_proj` (`attn_qkv`) and `gate_up_proj` (`ffn_up`) as they are
  (no processor): the family reads them as row blocks;
- a model with tied embeddings has no `output.weight`: the LM head is `token_embd.weight`.

A file cut short is refused when it is opened, naming the first tensor that ends past its end; a
tensor whose de-quantized values are not finite is refused naming the tensor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .errors import WeightError

CHUNK_ELEMENTS = 1 << 22  # float32 values de-quantized per block of rows (16 MiB)
THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute(w, n_head)`: rows back in Hugging Face's order."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise WeightError(f"cannot undo llama.cpp's q/k permutation: {rows} rows for {n_head} heads")
    return np.ascontiguousarray(w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


NORM_SHIFTED = ("gemma3",)  # architectures whose norm weights llama.cpp stores as w + 1


def permuted(arch: str, gguf_name: str) -> bool:
    """A q/k weight whose rows llama.cpp permuted (`llama` files only)."""
    return arch == "llama" and (".attn_q." in gguf_name or ".attn_k." in gguf_name)


def norm_shifted(arch: str, gguf_name: str) -> bool:
    """A norm weight llama.cpp stored as w + 1 (transformers' test, verbatim: `"norm.weight" in name`)."""
    return arch in NORM_SHIFTED and "norm.weight" in gguf_name


class GGUFSource:
    """Hugging Face tensor name -> float32 array, de-quantized on demand from one GGUF file."""

    def __init__(self, reader: Any, config: dict[str, Any]):
        from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

        from .gguf_reader import gguf_architecture

        self.reader, self.path = reader, Path(reader.path)
        self.arch = gguf_architecture(reader)
        arch = next((k for k, v in MODEL_ARCH_NAMES.items() if v == self.arch), None)
        if arch is None:
            raise WeightError(f"{self.path.name}: the gguf package does not know architecture {self.arch!r}")
        self._names = get_tensor_name_map(arch, int(config["num_hidden_layers"]))
        self._tensors = {t.name: t for t in reader.tensors}
        self._heads = (int(config["num_attention_heads"]), int(config["num_key_value_heads"]))

    # --- names ---------------------------------------------------------------------------------
    def gguf_name(self, name: str) -> str:
        """The GGUF name of a Hugging Face tensor name (`model.layers.0.self_attn.q_proj.weight` ->
        `blk.0.attn_q.weight`), or the name itself when gguf's table has none."""
        base, _, suffix = name.rpartition(".")
        mapped = self._names.get_name(base) if base else None
        return f"{mapped}.{suffix}" if mapped else name

    def __contains__(self, name: str) -> bool:
        return self.gguf_name(name) in self._tensors

    def names(self) -> list[str]:
        return list(self._tensors)

    def _tensor(self, name: str) -> Any:
        g = self.gguf_name(name)
        if g not in self._tensors:
            raise WeightError(f"tensor {name!r} (GGUF {g!r}) is not in {self.path.name} (a file of another layout?)")
        return self._tensors[g]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(self._tensor(name).shape.tolist()))

    # --- values --------------------------------------------------------------------------------
    def _raw(self, t: Any, first_row: int = 0, rows: int | None = None) -> np.ndarray:
        """Rows [first_row, first_row + rows) of a tensor as stored (bytes or F16/F32 values), read
        from the file (not through the reader's memory map, whose touched pages would stay resident)."""
        from gguf import GGML_QUANT_SIZES

        shape = self.shape_of(t)
        row_elems = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        total_rows = shape[0] if len(shape) > 1 else 1
        rows = total_rows - first_row if rows is None else rows
        block, type_size = GGML_QUANT_SIZES[t.tensor_type]
        row_bytes = row_elems * type_size // block
        raw = np.fromfile(self.path, dtype=np.uint8, count=rows * row_bytes, offset=int(t.data_offset) + first_row * row_bytes)
        if raw.size != rows * row_bytes:
            raise WeightError(f"tensor {t.name!r}: {self.path.name} ended while reading it (truncated?)")
        return raw.reshape(rows, row_bytes)

    @staticmethod
    def shape_of(t: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(t.shape.tolist()))

    def _dequantize(self, t: Any, raw: np.ndarray) -> np.ndarray:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        kind = GGMLQuantizationType(t.tensor_type)
        try:
            if kind == GGMLQuantizationType.F32:
                return raw.view(np.float32)
            if kind == GGMLQuantizationType.F16:
                return raw.view(np.float16).astype(np.float32)
            return dequantize(raw, kind)
        except NotImplementedError as e:
            raise WeightError(f"tensor {t.name!r} has GGUF type {kind.name}, which the gguf package cannot "
                              f"de-quantize") from e

    def _rows(self, t: Any, first: int, count: int) -> np.ndarray:
        """Rows [first, first + count) de-quantized, blocks of rows on THREADS threads (numpy releases
        the GIL in its loops, so the blocks run in parallel)."""
        out = np.empty((count, *self.shape_of(t)[1:]), np.float32)
        step = max(1, CHUNK_ELEMENTS // max(1, int(np.prod(out.shape[1:]))))

        def block(r: int) -> None:
            n = min(step, count - r)
            out[r:r + n] = self._dequantize(t, self._raw(t, first + r, n)).reshape(n, *out.shape[1:])

        starts = range(0, count, step)
        if len(starts) == 1 or THREADS == 1:
            for r in starts:
                block(r)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(block, starts))
        return out

    def _finite(self, t: Any, w: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(w)):
            raise WeightError(f"tensor {t.name!r} in {self.path.name} de-quantizes to NaN or infinite values "
                              f"(a corrupt file?)")
        return w

    def get(self, name: str, expect: tuple[int, ...] | None = None) -> np.ndarray:
        """The tensor as float32 in Hugging Face's layout, checked against `expect` when given."""
        t = self._tensor(name)
        shape = self.shape_of(t)
        if expect is not None and tuple(expect) != shape:
            raise WeightError(f"tensor {name!r} (GGUF {t.name!r}) has shape {list(shape)}, the config implies "
                              f"{list(expect)}")
        if len(shape) == 1:
            w = self._dequantize(t, self._raw(t)).reshape(shape).copy()
        else:
            w = self._rows(t, 0, shape[0])
        w = self._finite(t, w)
        if permuted(self.arch, t.name):
            w = unpermute(w, self._heads[0] if ".attn_q." in t.name else self._heads[1])
        if norm_shifted(self.arch, t.name):
            w = w - np.float32(1.0)
        return w

    def _processed(self, t: Any) -> bool:
        """Whether `get` changes the tensor after de-quantizing it (then it is read whole)."""
        return permuted(self.arch, t.name) or norm_shifted(self.arch, t.name)

    def row_blocks(self, name: str, expect: tuple[int, ...] | None = None, *,
                   block_bytes: int | None = None) -> Iterator[np.ndarray]:
        """A 2-D tensor as consecutive float32 blocks of rows (about `block_bytes` each), so an
        embedding or LM head is never held whole; a processed tensor (a permuted q/k) is read whole."""
        t = self._tensor(name)
        shape = self.shape_of(t)
        if len(shape) != 2 or self._processed(t):
            yield self.get(name, expect)
            return
        if expect is not None and tuple(expect) != shape:
            raise WeightError(f"tensor {name!r} (GGUF {t.name!r}) has shape {list(shape)}, the config implies "
                              f"{list(expect)}")
        from .weights import BLOCK_BYTES

        per = max(1, (block_bytes or BLOCK_BYTES) // (4 * max(1, shape[1])))
        for r in range(0, shape[0], per):
            yield self._finite(t, self._rows(t, r, min(per, shape[0] - r)))

    def get_rows(self, name: str, ids: list[int]) -> np.ndarray:
        """Rows `ids` of a 2-D tensor (an embedding), de-quantized one row at a time."""
        t = self._tensor(name)
        if self._processed(t):
            raise WeightError(f"get_rows of {name!r} (GGUF {t.name!r}): a tensor llama.cpp changed is read whole")
        rows = self.shape_of(t)[0]
        bad = [i for i in ids if not 0 <= i < rows]
        if bad:
            raise WeightError(f"tensor {name!r} has {rows} rows; asked for rows {bad[:5]}")
        return self._finite(t, np.concatenate([self._rows(t, i, 1) for i in ids]) if ids
                            else np.empty((0, *self.shape_of(t)[1:]), np.float32))
