"""The prefix cache: whole-prefix KV (one row, from position 0), its last hidden state and its
mid-layer states there (when the export has them), kept across calls in an LRU with a byte budget
that counts all three. Thread-safe; a prefix larger than the budget is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .kv import KVRows


Entry = tuple[KVRows, np.ndarray, "np.ndarray | None"]  # KV, hidden (H,), mid-layer states (L, H)


def entry_bytes(entry: Entry) -> int:
    """What an entry holds: its KV rows, its hidden state and its mid-layer states."""
    kv, hidden, layers = entry
    return kv.nbytes + hidden.nbytes + (0 if layers is None else layers.nbytes)


class PrefixCache:
    """LRU of token prefix → (KV rows, last hidden state, mid-layer states), at most ``budget`` bytes.

    >>> cache = PrefixCache(budget=100)
    >>> kv = KVRows([np.zeros((1, 1, 2, 2), np.float32)], [np.zeros((1, 1, 2, 2), np.float32)],
    ...             np.ones((1, 2), np.int64), np.array([2]))
    >>> cache.put((1, 2), kv, np.zeros(3, np.float32), np.zeros((2, 3), np.float32))
    >>> cache.get((1, 2)) is not None, cache.get((1,)), cache.used    # 48 of KV + 12 + 24
    (True, None, 84)
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()
        self.used = 0
        self._lock = threading.Lock()

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.int32).tobytes()

    def get(self, tokens: Sequence[int]) -> Entry | None:
        key = self._key(tokens)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def holds(self, tokens: Sequence[int]) -> bool:
        """Whether ``tokens`` is cached, without counting as a use (the LRU order is kept)."""
        with self._lock:
            return self._key(tokens) in self._entries

    def put(self, tokens: Sequence[int], kv: KVRows, hidden: np.ndarray, layers: np.ndarray | None = None) -> None:
        entry = (kv, hidden, layers)
        size = entry_bytes(entry)
        if self.budget <= 0 or size > self.budget:
            return
        key = self._key(tokens)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = entry
            self.used += size
            while self.used > self.budget:
                _, old = self._entries.popitem(last=False)
                self.used -= entry_bytes(old)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0


__all__ = ["PrefixCache"]
