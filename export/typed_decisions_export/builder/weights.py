"""Weights from safetensors shards, one tensor at a time, as float32 numpy arrays.

`SafetensorsSource(folder)` indexes every `*.safetensors` file of a Hugging Face folder (through
`model.safetensors.index.json` when there is one) with `safetensors.safe_open`, which reads only
the headers. `get(name)` reads one tensor and converts it to float32; nothing else stays resident.
`row_blocks(name)` yields a 2-D tensor a block of rows at a time and `get_rows(name, ids)` reads
only the rows `ids`, so the embedding and lm_head (152064 x 3584 at 7B: 2.2 GB in float32) need
not be held whole.

Memory (issue #32): the bytes are read with plain file reads (no mmap, so no file pages count in
the process's resident set, and the file is closed after each tensor), CHUNK_BYTES at a time, each
chunk converted straight into the preallocated float32 output. numpy has no bfloat16, so a BF16
chunk is read as uint16 and widened exactly into the output's uint32 view (a bfloat16 is the top
half of a float32): the largest transient is one chunk, never a full-size copy. Missing tensors,
a wrong shape and a file shorter than its header says are refused, naming the tensor and the file;
so are NaN and infinite values, checked chunk by chunk.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .errors import WeightError

_NUMPY = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8"), "BF16": np.dtype("<u2")}
CHUNK_BYTES = 1 << 24  # source bytes read and converted at a time (16 MiB)
BLOCK_BYTES = 1 << 26  # float32 bytes of rows row_blocks hands over at a time (64 MiB)


class SafetensorsSource:
    """name -> float32 array, read on demand from the folder's safetensors files."""

    def __init__(self, folder: Path):
        from safetensors import safe_open

        self.folder = Path(folder)
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise WeightError(f"{self.folder}: no *.safetensors files (the graph builder reads safetensors only)")
        self._where: dict[str, Path] = {}
        self._meta: dict[str, tuple[str, tuple[int, ...]]] = {}
        self._offsets: dict[Path, tuple[int, dict]] = {}  # file -> (data start, header)
        for path in files:
            try:
                with safe_open(str(path), framework="numpy") as f:
                    for name in f.keys():
                        s = f.get_slice(name)
                        self._where[name] = path
                        self._meta[name] = (s.get_dtype(), tuple(int(d) for d in s.get_shape()))
            except Exception as e:  # safetensors refuses a truncated file at open: name the first tensor cut
                self._truncated(path)
                raise WeightError(f"{path.name}: not a readable safetensors file ({e})") from e

    def names(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        self._require(name)
        return self._meta[name][1]

    def _require(self, name: str) -> None:
        if name not in self._where:
            raise WeightError(f"tensor {name!r} is not in {self.folder} (a checkpoint of another layout, or a "
                              f"truncated set of shards)")

    def _header(self, path: Path) -> tuple[int, dict]:
        if path not in self._offsets:
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                self._offsets[path] = (8 + n, json.loads(f.read(n)))
        return self._offsets[path]

    def _truncated(self, path: Path) -> None:
        """Raise naming the first tensor that ends past the end of `path`, if its header says so."""
        try:
            base, header = self._header(path)
        except (OSError, ValueError, struct.error):
            return
        size = path.stat().st_size
        cut = sorted((v["data_offsets"][1], k) for k, v in header.items()
                     if k != "__metadata__" and base + v["data_offsets"][1] > size)
        if cut:
            end, name = cut[0]
            raise WeightError(f"tensor {name!r}: {path.name} is truncated ({size} bytes, the tensor ends at byte "
                              f"{base + end}); download it again")

    def _check_extent(self, name: str, path: Path) -> tuple[int, int]:
        """(start, stop) of the tensor's bytes in its file, refused when the file is too short."""
        base, header = self._header(path)
        start, stop = header[name]["data_offsets"]
        size = path.stat().st_size
        if base + stop > size:
            raise WeightError(f"tensor {name!r}: {path.name} is truncated ({size} bytes, the tensor ends at byte "
                              f"{base + stop}); download it again")
        return base + start, base + stop

    def _locate(self, name: str, expect: tuple[int, ...] | None) -> tuple[Path, str, tuple[int, ...], int, int]:
        """(file, dtype, shape, start, stop) of a tensor, its shape and dtype checked."""
        self._require(name)
        dtype, shape = self._meta[name]
        if expect is not None and tuple(expect) != shape:
            raise WeightError(f"tensor {name!r} has shape {list(shape)}, the config implies {list(expect)}")
        path = self._where[name]
        if dtype not in _NUMPY:
            raise WeightError(f"tensor {name!r} in {path.name} has dtype {dtype}; the builder reads F32, F16, BF16")
        start, stop = self._check_extent(name, path)
        return path, dtype, shape, start, stop

    @staticmethod
    def _convert(raw: np.ndarray, dtype: str, out: np.ndarray) -> None:
        """Stored values `raw` (read as _NUMPY[dtype]) into the float32 array `out` of the same size."""
        if dtype == "BF16":  # exact: the stored half is the top half of the float32
            np.left_shift(raw, 16, out=out.view(np.uint32), dtype=np.uint32)
        else:
            out[...] = raw  # F32 copies, F16 widens exactly, F64 rounds to nearest as astype does

    def _read_into(self, name: str, f, path: Path, dtype: str, offset: int, out: np.ndarray) -> None:
        """Fill the flat float32 array `out` from the file `f` at byte `offset`, CHUNK_BYTES at a time."""
        width = _NUMPY[dtype].itemsize
        step = max(1, CHUNK_BYTES // width)
        f.seek(offset)
        for i in range(0, out.size, step):
            n = min(step, out.size - i)
            if dtype == "F32":  # straight into the output: no conversion, no buffer
                got = f.readinto(memoryview(out[i:i + n]).cast("B"))
            else:
                buf = bytearray(n * width)
                got = f.readinto(buf)
                if got == n * width:
                    self._convert(np.frombuffer(buf, dtype=_NUMPY[dtype]), dtype, out[i:i + n])
            if got != n * width:
                raise WeightError(f"tensor {name!r}: {path.name} ended while reading it; download it again")
            if not np.isfinite(out[i:i + n]).all():
                raise WeightError(f"tensor {name!r} in {path.name} holds NaN or infinite values (a corrupt file?)")

    def get(self, name: str, expect: tuple[int, ...] | None = None) -> np.ndarray:
        """The tensor as a float32 array (a fresh copy), checked against `expect` when given."""
        path, dtype, shape, start, _ = self._locate(name, expect)
        out = np.empty(shape, np.float32)
        with open(path, "rb") as f:
            self._read_into(name, f, path, dtype, start, out.reshape(-1))
        return out

    def row_blocks(self, name: str, expect: tuple[int, ...] | None = None, *,
                   block_bytes: int | None = None) -> Iterator[np.ndarray]:
        """A 2-D tensor as consecutive float32 blocks of rows (about `block_bytes` each, one held at a
        time: the caller writes a block before asking for the next)."""
        path, dtype, shape, start, _ = self._locate(name, expect)
        if len(shape) != 2:
            raise WeightError(f"tensor {name!r} has shape {list(shape)}; row blocks need a 2-D tensor")
        rows, cols = shape
        per = max(1, (block_bytes or BLOCK_BYTES) // max(1, 4 * cols))
        width = _NUMPY[dtype].itemsize
        with open(path, "rb") as f:
            for r in range(0, rows, per):
                out = np.empty((min(per, rows - r), cols), np.float32)
                self._read_into(name, f, path, dtype, start + r * cols * width, out.reshape(-1))
                yield out

    def get_rows(self, name: str, ids: list[int]) -> np.ndarray:
        """Rows `ids` of a 2-D tensor, float32 (len(ids), cols): only those rows are read."""
        path, dtype, shape, start, _ = self._locate(name, None)
        if len(shape) != 2:
            raise WeightError(f"tensor {name!r} has shape {list(shape)}; get_rows needs a 2-D tensor")
        rows, cols = shape
        bad = [i for i in ids if not 0 <= i < rows]
        if bad:
            raise WeightError(f"tensor {name!r} has {rows} rows; asked for rows {bad[:5]}")
        out = np.empty((len(ids), cols), np.float32)
        width = _NUMPY[dtype].itemsize
        with open(path, "rb") as f:
            for j, i in enumerate(ids):
                self._read_into(name, f, path, dtype, start + i * cols * width, out[j])
        return out
