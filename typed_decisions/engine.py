"""The ONNX Runtime engine: logits of allowed next tokens after token contexts. Nothing else.

The engine knows nothing of choice/score/noul. Its one primitive is

    next_token_logits(contexts, allowed)  →  [ (len(allowed[i]),) float64 logits ]

computed as ``last_hidden_state[last] @ lm_head[allowed].T`` — never the full vocabulary. This is
"stop after the prompt", written once: there is no sampling code anywhere.

Work is shared in two ways:
- **within a call**, the contexts are arranged in a radix tree (a compressed token trie). Each
  edge (a run of tokens) is computed once, on top of its parent's KV cache; all edges of one depth
  are batched into one ``session.run`` (right-padded, positions continuing from each row's past,
  masked gaps). For a request that is: one prefill of the shared state prefix, one batched step for
  all question suffixes, one batched step for all multi-token label branches.
- **across calls**, KV caches of prefixes (the system prompt, a recently seen state) sit in an LRU
  cache with a byte budget; a call starts from the longest cached prefix of its root.

Dynamic INT8 models quantize activations with a per-tensor scale computed per ``run``: batching
rows together would make one row's answer depend on its neighbours, so quantized models run one
row per call (``max_batch_rows=1``) and results stay independent of how requests are batched.
(They still depend on where a cached prefix ends — the scales of a prefix step differ from those
of a full prefill — by up to 0.06–0.09 in probability on the 1.5B model; see docs/export.md.)
Sliding-window models run one row per call too: their window counts cache slots, which padding
would shift.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from .artifacts import Artifacts
from .errors import EngineError

_PAST_RE = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


# --------------------------------------------------------------------------- KV rows


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

    def row(self, b: int) -> KVRows:
        return KVRows([k[b : b + 1] for k in self.keys], [v[b : b + 1] for v in self.values],
                      self.mask[b : b + 1], self.next_pos[b : b + 1])

    def prefix(self, n: int) -> KVRows:
        """The first n positions of a single, unpadded row (a cache checkpoint), copied."""
        return KVRows([np.ascontiguousarray(k[:, :, :n]) for k in self.keys],
                      [np.ascontiguousarray(v[:, :, :n]) for v in self.values],
                      self.mask[:, :n].copy(), np.array([n], dtype=np.int64))


def stack_rows(rows: Sequence[KVRows], dtype: np.dtype) -> KVRows:
    """Stack single rows of different lengths, right-padding with masked zeros."""
    t = max(r.length for r in rows)
    n_layers = len(rows[0].keys)
    _, h, _, d = rows[0].keys[0].shape
    keys = [np.zeros((len(rows), h, t, d), dtype) for _ in range(n_layers)]
    values = [np.zeros((len(rows), h, t, d), dtype) for _ in range(n_layers)]
    mask = np.zeros((len(rows), t), np.int64)
    for b, r in enumerate(rows):
        n = r.length
        for i in range(n_layers):
            keys[i][b, :, :n] = r.keys[i][0]
            values[i][b, :, :n] = r.values[i][0]
        mask[b, :n] = r.mask[0]
    return KVRows(keys, values, mask, np.concatenate([r.next_pos for r in rows]))


# --------------------------------------------------------------------------- radix tree


@dataclass
class _Node:
    tokens: tuple[int, ...]                 # the edge from the parent
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)
    queries: list[int] = field(default_factory=list)  # indices of contexts ending here
    depth: int = 0
    kv: KVRows | None = None                 # this node's single-row cache, once computed
    hidden: np.ndarray | None = None         # last-position hidden state, once computed


def build_radix_tree(contexts: Sequence[Sequence[int]]) -> _Node:
    """Compressed trie of the contexts; the root's edge is their longest common prefix.

    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6)])
    >>> root.tokens, sorted(c.tokens for c in root.children.values())
    ((1, 2), [(3,), (4,)])
    """
    def insert(node: _Node, ctx: tuple[int, ...], q: int) -> None:
        while True:
            if not ctx:
                node.queries.append(q)
                return
            child = node.children.get(ctx[0])
            if child is None:
                node.children[ctx[0]] = _Node(ctx, node)
                node.children[ctx[0]].queries.append(q)
                return
            n = 0
            limit = min(len(child.tokens), len(ctx))
            while n < limit and child.tokens[n] == ctx[n]:
                n += 1
            if n < len(child.tokens):  # split the edge at n
                mid = _Node(child.tokens[:n], node)
                node.children[ctx[0]] = mid
                child.tokens = child.tokens[n:]
                child.parent = mid
                mid.children[child.tokens[0]] = child
                child = mid
            node, ctx = child, ctx[n:]

    root = _Node((), None)
    for q, c in enumerate(contexts):
        insert(root, tuple(c), q)
    # The root's edge is the longest common prefix: absorb a lone child of an empty root.
    while len(root.children) == 1 and not root.queries:
        (child,) = root.children.values()
        root.tokens += child.tokens
        root.children, root.queries = child.children, child.queries
        for grandchild in root.children.values():
            grandchild.parent = root

    def set_depth(node: _Node) -> None:
        for child in node.children.values():
            child.depth = node.depth + 1
            set_depth(child)

    set_depth(root)
    return root


# --------------------------------------------------------------------------- backbone


class Backbone:
    """An ONNX Runtime session over the exported backbone; names read from the graph once."""

    def __init__(self, artifacts: Artifacts, *, threads: int | None = None,
                 providers: Sequence[str] | None = None):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or os.cpu_count() or 1
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        available = ort.get_available_providers()
        if providers is None:
            providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        try:
            self.session = ort.InferenceSession(str(artifacts.onnx_path), opts, providers=list(providers))
        except Exception as e:  # ORT raises its own exception types
            raise EngineError(f"ONNX Runtime could not load {artifacts.onnx_path}: {e}") from e
        self.providers = self.session.get_providers()
        inputs = {i.name: i for i in self.session.get_inputs()}
        layers = sorted({int(m.group(1)) for n in inputs if (m := _PAST_RE.match(n))})
        self.num_layers = len(layers)
        self.past_names = [(f"past_key_values.{i}.key", f"past_key_values.{i}.value") for i in layers]
        self.present_names = [(f"present.{i}.key", f"present.{i}.value") for i in layers]
        kv_type = inputs[self.past_names[0][0]].type if layers else "tensor(float)"
        self.kv_dtype = np.dtype(np.float16) if "float16" in kv_type else np.dtype(np.float32)
        arch = artifacts.architecture
        self.kv_heads, self.head_dim = arch.num_kv_heads, arch.head_dim
        self.output_names = ["last_hidden_state"] + [n for pair in self.present_names for n in pair]
        self.pad_id = int(artifacts.tokenizer_info.get("pad_token_id") or 0)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V for one token across all layers (one row)."""
        return 2 * self.num_layers * self.kv_heads * self.head_dim * self.kv_dtype.itemsize

    def empty(self, batch: int = 1) -> KVRows:
        z = np.zeros((batch, self.kv_heads, 0, self.head_dim), self.kv_dtype)
        return KVRows([z] * self.num_layers, [z] * self.num_layers,
                      np.zeros((batch, 0), np.int64), np.zeros(batch, np.int64))

    def run(self, runs: Sequence[Sequence[int]], past: KVRows) -> tuple[np.ndarray, KVRows]:
        """Feed one token run per row after ``past``; return (last-real-position hidden (B, H), present)."""
        b = len(runs)
        s = max(len(r) for r in runs)
        input_ids = np.full((b, s), self.pad_id, np.int64)
        new_mask = np.zeros((b, s), np.int64)
        for i, r in enumerate(runs):
            input_ids[i, : len(r)] = r
            new_mask[i, : len(r)] = 1
        position_ids = past.next_pos[:, None] + np.arange(s, dtype=np.int64)[None, :]  # (B, S)
        mask = np.concatenate([past.mask, new_mask], axis=1)                         # (B, T+S)
        feed: dict[str, np.ndarray] = {"input_ids": input_ids, "attention_mask": mask,
                                       "position_ids": position_ids}
        for (kn, vn), k, v in zip(self.past_names, past.keys, past.values):
            feed[kn], feed[vn] = k, v
        try:
            out = self.session.run(self.output_names, feed)
        except Exception as e:
            raise EngineError(f"ONNX Runtime failed on a batch of {b} rows × {s} tokens: {e}") from e
        hidden = out[0]                                                                  # (B, S, H)
        last = np.array([len(r) - 1 for r in runs])
        h_last = hidden[np.arange(b), last]                                              # (B, H)
        present = KVRows(list(out[1::2]), list(out[2::2]), mask,
                         past.next_pos + np.array([len(r) for r in runs], np.int64))
        return h_last, present


# --------------------------------------------------------------------------- engine


@dataclass
class EngineStats:
    calls: int = 0
    runs: int = 0
    tokens_computed: int = 0
    tokens_logical: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_tokens_reused: int = 0


class Engine:
    """Thread-safe shell around the backbone, the LM-head rows and the prefix cache."""

    def __init__(self, artifacts: Artifacts, *, threads: int | None = None,
                 providers: Sequence[str] | None = None, cache_bytes: int = 512 << 20,
                 max_batch_rows: int | None = None, max_batch_tokens: int = 8192,
                 max_batch_kv_bytes: int = 1 << 30):
        self.artifacts = artifacts
        self.backbone = Backbone(artifacts, threads=threads, providers=providers)
        self.lm_head = artifacts.lm_head                       # (vocab, H) memory-mapped
        arch = artifacts.architecture
        self.logit_scale = float(arch.logit_scale or 1.0)
        self.softcap = arch.final_logit_softcapping
        # One row per run where batching would change a row's result: dynamic INT8 (per-run
        # activation scales) and sliding-window attention (the window counts cache slots, so the
        # padding slots of a batched row would shift it).
        exact_alone = artifacts.quantization is not None or bool(arch.sliding_window)
        self.max_batch_rows = max_batch_rows or (1 if exact_alone else 32)
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_kv_bytes = max_batch_kv_bytes
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[bytes, tuple[KVRows, np.ndarray | None]] = OrderedDict()
        self._cache_used = 0
        self._lock = threading.Lock()
        self.stats = EngineStats()

    @property
    def providers(self) -> list[str]:
        return self.backbone.providers

    # -- the maths at the end: hidden → logits of the allowed rows only

    def logits(self, hidden: np.ndarray, allowed: Sequence[int]) -> np.ndarray:
        """``hidden (H,) @ lm_head[allowed].T`` in float64, then logit scale and soft-cap."""
        rows = np.asarray(self.lm_head[np.asarray(allowed, dtype=np.int64)], dtype=np.float64)  # (k, H)
        z = rows @ hidden.astype(np.float64) * self.logit_scale                                  # (k,)
        if self.softcap:
            z = self.softcap * np.tanh(z / self.softcap)
        return z

    # -- prefix cache

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.int32).tobytes()

    def _cache_get(self, tokens: tuple[int, ...], points: Sequence[int]
                   ) -> tuple[int, KVRows | None, np.ndarray | None]:
        """Longest cached prefix among ``points``: (its length, its KV, its last hidden or None)."""
        with self._lock:
            for n in sorted({p for p in points if 0 < p <= len(tokens)}, reverse=True):
                key = self._key(tokens[:n])
                entry = self._cache.get(key)
                if entry is not None:
                    self._cache.move_to_end(key)
                    self.stats.cache_hits += 1
                    self.stats.cache_tokens_reused += n
                    return n, entry[0], entry[1]
            self.stats.cache_misses += 1
            return 0, None, None

    def _cache_put(self, tokens: tuple[int, ...], kv: KVRows, hidden: np.ndarray | None) -> None:
        size = kv.nbytes
        if self.cache_bytes <= 0 or size > self.cache_bytes:
            return
        key = self._key(tokens)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return
            self._cache[key] = (kv, hidden)
            self._cache_used += size
            while self._cache_used > self.cache_bytes:
                _, (old, _) = self._cache.popitem(last=False)
                self._cache_used -= old.nbytes

    @property
    def cache_used_bytes(self) -> int:
        return self._cache_used

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cache_used = 0

    # -- the primitive

    def next_token_logits(self, contexts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]],
                          *, cache_points: Sequence[int] = (), use_cache: bool = True,
                          share_prefixes: bool = True) -> list[np.ndarray]:
        """Logits (float64) of ``allowed[i]`` as the next token after ``contexts[i]``.

        ``cache_points`` are prefix lengths of the common root worth keeping across calls (e.g.
        end of the system prompt, end of the state). ``share_prefixes=False`` runs every context
        separately from scratch (the reference the cache-transparency tests compare against).
        """
        if len(contexts) != len(allowed):
            raise ValueError("contexts and allowed must have the same length")
        if not contexts:
            return []
        if any(len(c) == 0 for c in contexts):
            raise ValueError("every context needs at least one token")
        with self._lock:  # counters are shared by every calling thread
            self.stats.calls += 1
            self.stats.tokens_logical += sum(len(c) for c in contexts)
        if not share_prefixes:
            out = []
            for c, a in zip(contexts, allowed):
                h, _ = self._run_rows([tuple(c)], [self.backbone.empty()])
                out.append(self.logits(h[0], a))
            return out

        root = build_radix_tree(contexts)
        results: list[np.ndarray | None] = [None] * len(contexts)
        self._compute_root(root, cache_points, use_cache)
        self._emit(root, allowed, results)
        previous, level = [root], list(root.children.values())
        while level:  # one depth of the radix tree per step, batched
            for start in range(0, len(level), self.max_batch_rows):
                for group in self._token_groups(level[start : start + self.max_batch_rows]):
                    hidden, present = self._run_rows([n.tokens for n in group],
                                                     [n.parent.kv for n in group])  # type: ignore[union-attr,misc]
                    for b, node in enumerate(group):
                        node.hidden = hidden[b]
                        node.kv = present.row(b) if node.children else None
            for node in level:
                self._emit(node, allowed, results)
            for node in previous:  # every child of the previous depth has run: free its caches
                node.kv = None
            previous, level = level, [c for n in level for c in n.children.values()]
        assert all(r is not None for r in results), "a context got no logits"
        return results  # type: ignore[return-value]

    # -- helpers

    def _token_groups(self, nodes: list[_Node]) -> list[list[_Node]]:
        """Split a batch so that rows × longest run stays under ``max_batch_tokens`` and the
        stacked past + present of the rows stays under ``max_batch_kv_bytes``.

        The second bound matters for many label branches after a long prompt: 40 rows over a
        1,221-token past of the 1.5B model would stack 2.8 GB of past and get as much present back.
        """
        per_token = self.backbone.kv_bytes_per_token
        groups: list[list[_Node]] = []
        cur: list[_Node] = []
        longest = past = 0
        for n in sorted(nodes, key=lambda n: len(n.tokens)):
            parent_len = n.parent.kv.length if n.parent is not None and n.parent.kv is not None else 0
            longest_new, past_new = max(longest, len(n.tokens)), max(past, parent_len)
            rows = len(cur) + 1
            too_many_tokens = longest_new * rows > self.max_batch_tokens
            too_many_bytes = 2 * rows * (past_new + longest_new) * per_token > self.max_batch_kv_bytes
            if cur and (too_many_tokens or too_many_bytes):
                groups.append(cur)
                cur, longest_new, past_new = [], len(n.tokens), parent_len
            cur.append(n)
            longest, past = longest_new, past_new
        if cur:
            groups.append(cur)
        return groups

    def _run_rows(self, runs: list[tuple[int, ...]], pasts: list[KVRows]) -> tuple[np.ndarray, KVRows]:
        past = pasts[0] if len(pasts) == 1 else stack_rows(pasts, self.backbone.kv_dtype)
        hidden, present = self.backbone.run(runs, past)
        with self._lock:
            self.stats.runs += 1
            self.stats.tokens_computed += sum(len(r) for r in runs)
        return hidden, present

    def _compute_root(self, root: _Node, cache_points: Sequence[int], use_cache: bool) -> None:
        """Prefill the shared root, starting from its longest cached prefix."""
        tokens = root.tokens
        if not tokens:
            root.kv = self.backbone.empty()
            return
        points = sorted({p for p in cache_points if 0 < p < len(tokens)} | {len(tokens)})
        start, kv, hidden = self._cache_get(tokens, points) if use_cache else (0, None, None)
        if start == len(tokens):
            if hidden is not None:
                root.kv, root.hidden = kv, hidden
                return
            # A checkpoint stored without its hidden state: recompute the last token only.
            assert kv is not None
            start, kv = start - 1, (kv.prefix(start - 1) if start > 1 else None)
        h, present = self._run_rows([tokens[start:]], [kv if kv is not None else self.backbone.empty()])
        root.hidden, root.kv = h[0], present
        if use_cache:
            for p in points:
                if p > start:
                    self._cache_put(tokens[:p], present if p == len(tokens) else present.prefix(p),
                                    h[0] if p == len(tokens) else None)

    def _emit(self, node: _Node, allowed: Sequence[Sequence[int]], results: list[np.ndarray | None]) -> None:
        for q in node.queries:
            assert node.hidden is not None
            results[q] = self.logits(node.hidden, allowed[q])


__all__ = ["Backbone", "Engine", "EngineStats", "KVRows", "build_radix_tree", "stack_rows"]
