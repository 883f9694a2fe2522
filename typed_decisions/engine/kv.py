"""KV rows: the key/value caches of a batch of sequences, and how segments become rows.

Each node of a call's radix tree (radix_tree.py) keeps the KV of its own edge only, a compact
single-row segment; a row's past is the concatenation of its path's segments (``stack_paths``),
right-padded with masked zeros to the longest row of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class KVRows:
    """KV caches of B sequences: per layer (B, kv_heads, T, head_dim); mask (B, T); next position (B,)."""

    keys: list[np.ndarray]
    values: list[np.ndarray]
    mask: np.ndarray
    next_pos: np.ndarray

    @property
    def length(self) -> int:
        return int(self.mask.shape[1])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values) + self.mask.nbytes

    def slice(self, b: int, start: int, stop: int) -> KVRows:
        """Positions [start, stop) of row b as a compact single row (a copy: holds nothing else alive)."""
        n = stop - start
        return KVRows([np.ascontiguousarray(k[b : b + 1, :, start:stop]) for k in self.keys],
                      [np.ascontiguousarray(v[b : b + 1, :, start:stop]) for v in self.values],
                      np.ones((1, n), np.int64), np.array([stop], np.int64))


def empty_rows(batch: int, layers: int, kv_heads: int, head_dim: int, dtype: np.dtype) -> KVRows:
    """B rows with no past."""
    z = np.zeros((batch, kv_heads, 0, head_dim), dtype)
    return KVRows([z] * layers, [z] * layers, np.zeros((batch, 0), np.int64), np.zeros(batch, np.int64))


def stack_paths(paths: Sequence[Sequence[KVRows]], dtype: np.dtype) -> KVRows:
    """One batch of rows, row b the concatenation of the segments ``paths[b]`` (oldest first, each
    a compact single row), right-padded with masked zeros to the longest row.

    >>> seg = lambda n: KVRows([np.ones((1, 1, n, 2))], [np.ones((1, 1, n, 2))], np.ones((1, n), np.int64), np.array([n]))
    >>> kv = stack_paths([[seg(2), seg(1)], [seg(1)]], np.dtype(np.float64))
    >>> kv.keys[0].shape, kv.mask.tolist(), kv.next_pos.tolist()
    ((2, 1, 3, 2), [[1, 1, 1], [1, 0, 0]], [3, 1])
    """
    lengths = [sum(s.length for s in path) for path in paths]
    t = max(lengths)
    ref = next(s for path in paths for s in path)
    n_layers = len(ref.keys)
    _, h, _, d = ref.keys[0].shape
    keys = [np.zeros((len(paths), h, t, d), dtype) for _ in range(n_layers)]
    values = [np.zeros((len(paths), h, t, d), dtype) for _ in range(n_layers)]
    mask = np.zeros((len(paths), t), np.int64)
    for b, path in enumerate(paths):
        at = 0
        for seg in path:
            n = seg.length
            for i in range(n_layers):
                keys[i][b, :, at : at + n] = seg.keys[i][0]
                values[i][b, :, at : at + n] = seg.values[i][0]
            at += n
        mask[b, :at] = 1
    return KVRows(keys, values, mask, np.array(lengths, np.int64))


def concat(segments: Sequence[KVRows], dtype: np.dtype) -> KVRows:
    """One compact row from consecutive segments (a single segment is returned as is)."""
    return segments[0] if len(segments) == 1 else stack_paths([segments], dtype)


__all__ = ["KVRows", "concat", "empty_rows", "stack_paths"]
