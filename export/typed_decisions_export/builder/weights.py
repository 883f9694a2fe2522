"""Weights from safetensors shards, one tensor at a time, as float32 numpy arrays.

`SafetensorsSource(folder)` indexes every `*.safetensors` file of a Hugging Face folder (through
`model.safetensors.index.json` when there is one) with `safetensors.safe_open`, which reads only
the headers. `get(name)` reads one tensor and converts it to float32; nothing else stays resident.
numpy has no bfloat16, so BF16 tensors are read as uint16 from the file (the same bytes safe_open
would hand over) and widened exactly (a bfloat16 is the top half of a float32). Missing tensors,
a wrong shape and a file shorter than its header says are refused, naming the tensor and the file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .errors import WeightError

_NUMPY = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


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

    def get(self, name: str, expect: tuple[int, ...] | None = None) -> np.ndarray:
        """The tensor as a float32 array (a fresh copy), checked against `expect` when given."""
        self._require(name)
        dtype, shape = self._meta[name]
        if expect is not None and tuple(expect) != shape:
            raise WeightError(f"tensor {name!r} has shape {list(shape)}, the config implies {list(expect)}")
        path = self._where[name]
        start, stop = self._check_extent(name, path)
        if dtype == "BF16":
            raw = np.fromfile(path, dtype=np.uint16, count=(stop - start) // 2, offset=start)
            out = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        elif dtype in _NUMPY:
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="numpy") as f:
                    out = f.get_tensor(name).astype(np.float32, copy=False)
            except Exception as e:
                raise WeightError(f"tensor {name!r} in {path.name} could not be read: {e}") from e
        else:
            raise WeightError(f"tensor {name!r} in {path.name} has dtype {dtype}; the builder reads F32, F16, BF16")
        if not np.all(np.isfinite(out)):
            raise WeightError(f"tensor {name!r} in {path.name} holds NaN or infinite values (a corrupt file?)")
        return out
