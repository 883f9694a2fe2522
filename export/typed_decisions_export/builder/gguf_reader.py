"""The gguf package's GGUF reader, as the builder opens it: one reader per file, shared by the
metadata (gguf_config.py) and the tensors (gguf_weights.py).

`open_reader(path)` is gguf's GGUFReader with two changes: a file cut short is refused naming the
first tensor that ends past its end (the stock reader fails with a numpy reshape error), and arrays
of strings (the tokenizer's tokens and merges) are stepped over keeping only their length
(`array_length`): the stock reader makes two numpy views per string, ~0.5 GB and ~10 s for a 150k
vocabulary. The tokenizer is built by transformers from its own reading of the file.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BuilderError, WeightError


def _tensor_fields_cut(reader: Any, start: int, fields: list) -> None:
    """Raise naming the first tensor whose bytes end past the end of the file."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    size = len(reader.data)
    for f in fields:
        _len, name_data, _n_dims, dims, raw_dtype, offset = f.parts
        name = bytes(name_data).decode("utf-8", "replace")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(int(raw_dtype[0]))]
        except (ValueError, KeyError) as e:
            raise WeightError(f"tensor {name!r}: unknown GGUF tensor type {int(raw_dtype[0])} (a corrupt file?)") from e
        end = start + int(offset[0]) + int(np.prod(dims.astype(np.int64))) * type_size // block
        if end > size:
            raise WeightError(f"tensor {name!r}: the GGUF file is truncated ({size} bytes, the tensor ends at byte "
                              f"{end}); download it again")


@cache
def _reader_class():
    from gguf import GGUFReader, GGUFValueType

    class Reader(GGUFReader):
        """gguf's reader, refusing a truncated file by the name of the tensor it cuts (the stock
        reader fails with a numpy reshape error), and stepping over arrays of strings (the
        tokenizer's tokens and merges: the stock reader makes two numpy views per string, ~0.5 GB
        and ~10 s for a 150k vocabulary) keeping only their length: `array_length(field)`.
        The tokenizer is built by transformers from its own reading of the file."""

        def __init__(self, path):
            self.path = Path(path)
            super().__init__(path)

        def _get_field_parts(self, orig_offs, raw_type):
            if GGUFValueType(raw_type) != GGUFValueType.ARRAY or self.byte_order != "I":
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            if GGUFValueType(raw_itype[0]) != GGUFValueType.STRING:
                return super()._get_field_parts(orig_offs, raw_type)
            alen = self._get(orig_offs + 4, np.uint64)
            offs, view = orig_offs + 12, memoryview(self.data)
            for _ in range(int(alen[0])):
                offs += 8 + int.from_bytes(view[offs:offs + 8], "little")
            return offs - orig_offs, [raw_itype, alen], [], [GGUFValueType.ARRAY, GGUFValueType.STRING]

        def _build_tensors(self, start_offs, fields):
            _tensor_fields_cut(self, start_offs, fields)
            super()._build_tensors(start_offs, fields)

    return Reader


def array_length(field: Any) -> int:
    """The element count of an array field (also of one whose strings the Reader stepped over)."""
    return int(field.parts[4][0])


def Reader(path: Path) -> Any:
    return _reader_class()(path)


def open_reader(path: Path) -> Any:
    """The gguf package's reader on `path`; a truncated file names the first tensor it cuts."""
    try:
        return Reader(path)
    except WeightError:
        raise
    except Exception as e:
        raise WeightError(f"{Path(path).name}: not a readable GGUF file ({type(e).__name__}: {e})") from e


def field(reader: Any, key: str) -> Any:
    """One metadata value (a scalar, a string, or a list for arrays), None when absent."""
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def gguf_architecture(reader: Any) -> str:
    arch = field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise BuilderError("GGUF metadata has no general.architecture")
    return arch
