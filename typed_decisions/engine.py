"""The ONNX Runtime engine: logits of allowed next tokens after token contexts. Nothing else.

The engine knows nothing of choice/score/noul. Its one primitive is

    next_token_logits(contexts, allowed)  →  [ (len(allowed[i]),) float64 logits ]

computed as ``last_hidden_state[last] @ lm_head[allowed].T`` — never the full vocabulary. This is
"stop after the prompt", written once: there is no sampling code anywhere.

Work is shared in two ways:
- **within a call**, the contexts are arranged in a radix tree (a compressed token trie). Each
  edge (a run of tokens) is computed once, on top of its parent's KV cache. With an export whose
  attention_mask is 4-D (format version 2), every ready node's pending subtree — a state, its
  question suffixes and their label branches — runs as ONE row over ONE copy of that node's past,
  a tree block (tree_block.py: each token sees the past and its own ancestors; positions = past +
  depth); blocks share a ``session.run`` as right-padded rows, and a subtree over the budgets runs
  its top node as a row (a long one in chunks) and packs its children next. A row never mixes two
  requests (``owners``): each request's tokens sit at the columns they would have alone. Without
  the 4-D mask (older exports, sliding windows, per-tensor INT8: ``packed_reason``) each level of
  nodes whose parents are ready runs as rows, each row stacking its parent's KV. Each
  node keeps only the KV of its own edge (a compact segment, its columns of the run's present); a
  row's past is the concatenation of its path's segments, so a call holds each distinct token's
  KV once.
- **across calls**, KV caches of prefixes (the system prompt, a recently seen state) sit in an LRU
  cache with a byte budget. Every request's checkpoints are nodes of the tree, looked up and stored
  per request, so a state seen before is reused whether it comes alone or in a batch.

Rows of one run are independent: every operation of the graph is per token except attention, which
reads only the row's own past (masked padding adds exact zeros). INT8 exports quantize activations
with one scale per token (export/…/int8_matmul.py), so a row's answer does not depend on its
batch-mates or on where a cached prefix ends either; tests hold float32 and INT8 to 1e-5 alone vs
batched vs cached. Two kinds of export still run one row per call (``rows_independent``): INT8
exports made with per-tensor activation scales (before per-token quantization), and sliding-window
models, whose window counts cache slots, which padding would shift.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from .artifacts import Artifacts
from .cpu import usable_cores
from .errors import EngineError
from .quantized import check_cpu, graph_file, rows_independent
from .readout import streaming_logsumexp
from .tree_block import Block, chain, depths, lay_out, mask_bytes, tree_mask

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

    def slice(self, b: int, start: int, stop: int) -> KVRows:
        """Positions [start, stop) of row b as a compact single row (a copy: holds nothing else alive)."""
        n = stop - start
        return KVRows([np.ascontiguousarray(k[b : b + 1, :, start:stop]) for k in self.keys],
                      [np.ascontiguousarray(v[b : b + 1, :, start:stop]) for v in self.values],
                      np.ones((1, n), np.int64), np.array([stop], np.int64))


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


# --------------------------------------------------------------------------- radix tree


@dataclass(eq=False)
class _Node:
    tokens: tuple[int, ...]                 # the edge from the parent
    parent: _Node | None
    owner: int | None = None                 # whose contexts this edge serves; None: shared by owners
    # (owner, first token) for an owner's edge, (None, all its tokens) for a shared segment:
    children: dict[tuple[int | None, int | tuple[int, ...]], _Node] = field(default_factory=dict)
    queries: list[int] = field(default_factory=list)  # indices of contexts ending here
    checkpoint: bool = False                 # the prefix ending here is worth caching across calls
    # Filled in by the engine:
    kv: KVRows | None = None                 # KV of this edge's tokens only (or, cached, from position 0)
    kv_from_start: bool = False              # kv covers the whole prefix (restored from the cache)
    hidden: np.ndarray | None = None         # last-position hidden state, once computed

    @property
    def start(self) -> int:
        """Position of this edge's first token."""
        n, node = 0, self.parent
        while node is not None:
            n += len(node.tokens)
            node = node.parent
        return n

    def prefix(self) -> tuple[int, ...]:
        """Every token from the root to the end of this edge."""
        parts, node = [], self
        while node is not None:
            parts.append(node.tokens)
            node = node.parent
        return tuple(t for part in reversed(parts) for t in part)

    def path_kv(self) -> list[KVRows]:
        """Segments whose concatenation is the KV of this node's whole prefix (oldest first)."""
        segs, node = [], self
        while node is not None and node.tokens:
            assert node.kv is not None, "a node's ancestors must be computed or cached first"
            segs.append(node.kv)
            if node.kv_from_start:
                break
            node = node.parent
        return segs[::-1]


def _split(node: _Node, n: int) -> _Node:
    """Split ``node``'s edge after n tokens; returns the new upper node (the old one keeps the tail)."""
    upper = _Node(node.tokens[:n], node.parent, owner=node.owner)
    if node.parent is not None:
        node.parent.children[(node.owner, node.tokens[0])] = upper
    node.tokens = node.tokens[n:]
    node.parent = upper
    upper.children[(node.owner, node.tokens[0])] = node
    return upper


def _insert(node: _Node, ctx: tuple[int, ...], owner: int | None) -> _Node:
    """Walk ``ctx`` down from ``node`` through edges of ``owner``, adding or splitting edges;
    returns the node whose edge ends exactly at the end of ``ctx``."""
    while ctx:
        child = node.children.get((owner, ctx[0]))
        if child is None:
            child = node.children[(owner, ctx[0])] = _Node(ctx, node, owner=owner)
            return child
        n, limit = 0, min(len(child.tokens), len(ctx))
        while n < limit and child.tokens[n] == ctx[n]:
            n += 1
        if n < len(child.tokens):
            child = _split(child, n)
        node, ctx = child, ctx[n:]
    return node


def _share(node: _Node, segment: tuple[int, ...]) -> _Node:
    """The shared child of ``node`` whose edge is exactly ``segment`` (added if missing). Shared
    segments are keyed by all their tokens and never split: two segments that merely begin alike
    are two nodes."""
    key = (None, segment)
    child = node.children.get(key)
    if child is None:
        child = node.children[key] = _Node(segment, node, owner=None)
    return child


def _cuts(points: Sequence[int], length: int) -> list[int]:
    return sorted({int(p) for p in points if 0 < p <= length})


def build_radix_tree(contexts: Sequence[Sequence[int]],
                     checkpoints: Sequence[Sequence[int]] = (),
                     owners: Sequence[int] | None = None,
                     shared_cuts: Sequence[Sequence[int]] = ()) -> _Node:
    """Compressed trie of the contexts under an empty root: contexts sharing a prefix share the
    nodes of that prefix (a request's state is one node, its questions' suffixes its children).

    ``checkpoints[i]`` are prefix lengths of context i worth caching: each becomes a node
    boundary (an edge is split there) marked ``checkpoint``.

    ``owners[i]`` says whose context i is (the Decider: its request) and ``shared_cuts[i]`` where
    it may be shared with other owners' contexts (the request's cache points: the end of the chat
    head, of the state). Up to its last cut a context is a chain of whole segments, each shared
    only with a context that has the very same segment after the very same segments; after it,
    tokens are shared only with contexts of the same owner. So a request's nodes are the same
    whatever else shares the call — a state is never cut where it happens to begin like another
    request's state — and tree blocks (``Engine._pack``) lay them out as if it came alone. Every
    checkpoint of an owned context must be one of its cuts. Without owners every context belongs
    to one owner (0) and shares any common prefix, token by token.

    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6)])
    >>> (shared,) = root.children.values()
    >>> shared.tokens, sorted(c.tokens for c in shared.children.values())
    ((1, 2), [(3,), (4,)])
    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4)], checkpoints=[(1,), (1,)])
    >>> (head,) = root.children.values()
    >>> head.tokens, head.checkpoint, [c.tokens for c in head.children.values()]
    ((1,), True, [(2,)])
    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 3)], owners=[0, 1], shared_cuts=[(2,), (2,)])
    >>> (state,) = root.children.values()
    >>> state.tokens, state.owner, sorted((c.owner, c.tokens) for c in state.children.values())
    ((1, 2), None, [(0, (3,)), (1, (3,))])
    >>> root = build_radix_tree([(1, 2, 3), (1, 2, 4, 3)], owners=[0, 1], shared_cuts=[(2,), (3,)])
    >>> sorted(c.tokens for c in root.children.values())   # states (1, 2) and (1, 2, 4): two nodes
    [(1, 2), (1, 2, 4)]
    """
    root = _Node((), None)
    owner_of = [0] * len(contexts) if owners is None else owners
    segments: list[dict[int, _Node]] = []  # per context: its shared nodes by where they end
    for q, ctx in enumerate(map(tuple, contexts)):
        node, at, mine = root, 0, {0: root}
        if owners is not None:
            for cut in _cuts(shared_cuts[q], len(ctx)):
                node, at = _share(node, ctx[at:cut]), cut
                mine[cut] = node
        segments.append(mine)
        _insert(node, ctx[at:], owner_of[q]).queries.append(q)
    for q, (ctx, points) in enumerate(zip(map(tuple, contexts), checkpoints)):
        mine, split = segments[q], max(segments[q])
        for p in _cuts(points, len(ctx)):
            if p > split:
                _mark(mine[split], ctx, split, p, owner_of[q])
            elif p in mine:
                mine[p].checkpoint = True
            else:
                raise ValueError(f"checkpoint {p} of context {q} falls inside a shared segment: "
                                 f"it must be one of the context's shared_cuts")
    return root


def _mark(node: _Node, ctx: tuple[int, ...], end: int, p: int, owner: int) -> None:
    """Make position p of ``ctx`` (of ``owner``, below ``node`` whose edge ends at ``end``) a node
    boundary and mark that node a checkpoint."""
    while end < p:
        node = node.children[(owner, ctx[end])]
        end += len(node.tokens)
    if end > p:  # p falls inside this edge: split it
        node = _split(node, len(node.tokens) - (end - p))
    node.checkpoint = True


# --------------------------------------------------------------------------- backbone


class Backbone:
    """An ONNX Runtime session over the exported backbone; names read from the graph once."""

    def __init__(self, artifacts: Artifacts, *, threads: int | None = None,
                 providers: Sequence[str] | None = None):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or usable_cores()
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        available = ort.get_available_providers()
        if providers is None:
            providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        # INT8 with 8-bit weights: the graph whose integer kernel is exact on this CPU (quantized.py).
        rel = graph_file(artifacts.quantization)
        self.onnx_path = artifacts.root / rel if rel else artifacts.onnx_path
        try:
            self.session = ort.InferenceSession(str(self.onnx_path), opts, providers=list(providers))
        except Exception as e:  # ORT raises its own exception types
            raise EngineError(f"ONNX Runtime could not load {self.onnx_path}: {e}") from e
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
        # Format version 2: attention_mask is (batch, 1, seq, past_seq + seq) bool (tree_block.py),
        # which lets one row hold a tree of nodes; version 1 and adopted graphs take (batch, total).
        self.takes_tree_mask = len(inputs["attention_mask"].shape) == 4
        self.num_heads = arch.num_attention_heads or arch.num_kv_heads

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
        hidden, present = self.run_blocks([chain(r) for r in runs], past)
        last = np.array([len(r) - 1 for r in runs])
        return hidden[np.arange(len(runs)), last], present                            # (B, H)

    def run_blocks(self, blocks: Sequence[Block], past: KVRows) -> tuple[np.ndarray, KVRows]:
        """Feed one block per row after ``past`` (right-padded); return (hidden (B, S, H), present).

        A chain (an ordinary run) goes to either graph; a tree block needs the 4-D mask
        (``tree_mask``). ``present.next_pos`` is meaningful for chains only.
        """
        b = len(blocks)
        s = max(len(k) for k in blocks)
        input_ids = np.full((b, s), self.pad_id, np.int64)
        new_mask = np.zeros((b, s), np.int64)
        depth = np.tile(np.arange(s, dtype=np.int64), (b, 1))                        # (B, S); pads count on
        for i, k in enumerate(blocks):
            input_ids[i, : len(k)] = k.tokens
            new_mask[i, : len(k)] = 1
            depth[i, : len(k)] = depths(k.parent)
        position_ids = past.next_pos[:, None] + depth                                  # (B, S)
        mask = np.concatenate([past.mask, new_mask], axis=1)                           # (B, T+S)
        if self.takes_tree_mask:
            attention = tree_mask(past.mask, blocks, s)                                # (B, 1, S, T+S)
        else:
            assert all(np.array_equal(k.parent, chain(k.tokens).parent) for k in blocks), \
                "a 2-D-mask graph runs chains only"
            attention = mask
        feed: dict[str, np.ndarray] = {"input_ids": input_ids, "attention_mask": attention,
                                       "position_ids": position_ids}
        for (kn, vn), k, v in zip(self.past_names, past.keys, past.values):
            feed[kn], feed[vn] = k, v
        try:
            out = self.session.run(self.output_names, feed)
        except Exception as e:
            raise EngineError(f"ONNX Runtime failed on a batch of {b} rows × {s} tokens: {e}") from e
        present = KVRows(list(out[1::2]), list(out[2::2]), mask,
                         past.next_pos + np.array([len(k) for k in blocks], np.int64))
        return out[0], present                                                         # (B, S, H)


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
    packed_rows: int = 0          # rows that held a tree block of more than one node


class Engine:
    """Thread-safe shell around the backbone, the LM-head rows and the prefix cache.

    Memory of one call: the KV of each distinct token of the call once (compact per-node segments,
    at most ``max_call_kv_bytes``, refused above) plus one batch in flight (stacked past + present,
    at most ``max_batch_kv_bytes``); prompts longer than ``prefill_chunk`` tokens are prefilled in
    chunks of that size.
    """

    def __init__(self, artifacts: Artifacts, *, threads: int | None = None,
                 providers: Sequence[str] | None = None, cache_bytes: int = 512 << 20,
                 max_batch_rows: int | None = None, max_batch_tokens: int = 8192,
                 max_batch_kv_bytes: int = 1 << 30, max_call_kv_bytes: int = 4 << 30,
                 prefill_chunk: int = 2048, cpu_check: bool = True, packed: bool | None = None,
                 solo_tokens: int = 256):
        self.artifacts = artifacts
        self.backbone = Backbone(artifacts, threads=threads, providers=providers)
        # Tree blocks (tree_block.py) when the graph takes the 4-D mask; ``packed_reason`` says
        # why not otherwise. packed=True forces them on per-tensor INT8 (for studies), packed=False
        # turns them off.
        self.packed, self.packed_reason = _packing(artifacts, self.backbone, packed)
        self.lm_head = artifacts.lm_head                       # (vocab, H) memory-mapped
        arch = artifacts.architecture
        self.logit_scale = float(arch.logit_scale or 1.0)
        self.softcap = arch.final_logit_softcapping
        self.max_batch_rows = max_batch_rows or (32 if rows_independent(artifacts) else 1)
        # INT8 rows batch only with rows whose past has the same length. A row after a shorter
        # past than its batch-mates' sees masked padding between its past and its new tokens,
        # which shifts its real keys in attention's vectorized sums; the float result moves by
        # ~1e-7, harmless in float32, but it can tip a per-token rounding in the next INT8
        # MatMul and grow to ~1e-2 over the layers. With equal pasts a row's arithmetic is
        # bit-for-bit that of the row alone (padding only after its tokens adds exact zeros).
        self.equal_pasts = artifacts.quantization is not None
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_kv_bytes = max_batch_kv_bytes
        self.max_call_kv_bytes = max_call_kv_bytes
        self.prefill_chunk = prefill_chunk
        # A row of this many tokens already streams the weights once for enough tokens: stacked
        # with others it gains no GEMM efficiency, only pads to the longest row and copies its
        # past into the batch (batched ~300-token requests ran 0.86x of sequential, docs/benchmarks.md).
        self.solo_tokens = solo_tokens
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[bytes, tuple[KVRows, np.ndarray]] = OrderedDict()
        self._cache_used = 0
        self._lock = threading.Lock()
        # One ONNX Runtime run at a time: its intra-op pool already uses every usable core, so
        # callers on several threads (asyncio.to_thread, LangChain batch) would only oversubscribe.
        self._run_lock = threading.Lock()
        self.stats = EngineStats()
        # INT8: refuse or warn when this CPU computes other numbers than the export measured
        # (quantized.py); cpu_check=False skips it, for studies of such exports only.
        self.cpu_check = check_cpu(self) if cpu_check else None

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

    # -- prefix cache: whole-prefix KV (one row, from position 0) and its last hidden state

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.int32).tobytes()

    def _cache_get(self, tokens: tuple[int, ...]) -> tuple[KVRows, np.ndarray] | None:
        key = self._key(tokens)
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
            return entry

    def _cache_put(self, tokens: tuple[int, ...], kv: KVRows, hidden: np.ndarray) -> None:
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

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cache_used = 0

    # -- the primitive

    def next_token_logits(self, contexts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]],
                          *, cache_points: Sequence[int] | Sequence[Sequence[int]] = (),
                          use_cache: bool = True, share_prefixes: bool = True,
                          owners: Sequence[int] | None = None,
                          hidden_out: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Logits (float64) of ``allowed[i]`` as the next token after ``contexts[i]``.

        ``cache_points`` are prefix lengths worth keeping across calls (e.g. end of the system
        prompt, end of the state): one list for every context, or one list per context (several
        requests in one call, each with its own). A call starts each context from its longest
        cached prefix and stores the others, whatever else shares the call.
        ``owners`` (one per context, e.g. its request's index) keep each owner's nodes after its
        last cache point to itself (``build_radix_tree``): its tree blocks are then laid out as if it
        came alone, which INT8 needs for one answer per request (``_pack``).
        ``share_prefixes=False`` runs every context separately from scratch (the reference the
        cache-transparency tests compare against). ``hidden_out``, when given, receives each
        context's last hidden state (H,), in context order (``full_logsumexp`` reads it).
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
                node = _Node(tuple(c), _Node((), None))
                self._run_group([[node]])
                out.append(self.logits(node.hidden, a))
                if hidden_out is not None:
                    hidden_out.append(node.hidden)
            return out

        per_context = bool(cache_points) and not isinstance(cache_points[0], (int, np.integer))
        points = cache_points if per_context else [cache_points] * len(contexts)
        root = build_radix_tree(contexts, points if use_cache else (), owners, points)
        if use_cache:
            self._restore(root)
        todo = self._plan(root)
        self._check_call_bytes(todo)
        pending = set(todo)
        # Items whose parent is ready (cached, computed, or the root), batched per run: packed,
        # each ready node's pending subtree as tree blocks; unpacked, each node a row.
        first = [n for n in todo if n.parent not in pending]
        level = self._pack(first, pending) if self.packed else [[n] for n in first]
        while level:
            for start in range(0, len(level), self.max_batch_rows):
                for group in self._token_groups(level[start : start + self.max_batch_rows]):
                    self._run_group(group)
            done = [n for item in level for n in item]
            pending.difference_update(done)
            below = [c for n in done for c in n.children.values() if c in pending]
            level = self._pack(below, pending) if self.packed else [[c] for c in below]
        if use_cache and self.cache_bytes > 0:
            per_token = self.backbone.kv_bytes_per_token
            for node in todo:  # copy a prefix's segments into one row only when the cache can hold it
                if node.checkpoint and (node.start + len(node.tokens)) * per_token <= self.cache_bytes:
                    self._cache_put(node.prefix(), _concat(node.path_kv(), self.backbone.kv_dtype), node.hidden)
        results: list[np.ndarray | None] = [None] * len(contexts)
        hiddens: list[np.ndarray | None] = [None] * len(contexts)
        stack = [root]
        while stack:
            node = stack.pop()
            for q in node.queries:
                assert node.hidden is not None
                results[q] = self.logits(node.hidden, allowed[q])
                hiddens[q] = node.hidden
            stack.extend(node.children.values())
        assert all(r is not None for r in results), "a context got no logits"
        if hidden_out is not None:
            hidden_out.extend(hiddens)  # type: ignore[arg-type]
        return results  # type: ignore[return-value]

    # -- label mass (docs/METHOD.md §7): the one full-vocabulary product, per question on request

    def full_logsumexp(self, hidden: np.ndarray, *, exact: bool = False, chunk_rows: int = 8192) -> float:
        """log Σ_v exp(z_v) over the whole vocabulary, z = the logits ``logits`` computes (logit scale
        and soft-cap included), the sum in float64 with a running max (``streaming_logsumexp``).

        The product ``lm_head @ hidden`` is one float32 GEMV by default; ``exact=True`` makes it
        float64 like ``logits``, streamed over ``chunk_rows`` rows (8192 × H × 8 bytes at a time).
        Measured on the 1.5B head (151,936 × 1,536, Xeon AMX, 2 loaded cores): float32 80–130 ms,
        float64 1.6 s, their logsumexps 1.3e-9 apart (docs/METHOD.md §7) — the mass moves by
        ~1e-9 relative, so the default is the GEMV."""
        vocab = self.lm_head.shape[0]
        if exact:
            h64 = hidden.astype(np.float64)
            products = (np.asarray(self.lm_head[s : s + chunk_rows], dtype=np.float64) @ h64   # (c,)
                        for s in range(0, vocab, chunk_rows))
        else:
            products = iter([(self.lm_head @ hidden.astype(np.float32)).astype(np.float64)])  # (V,)

        def chunks():
            for z in products:
                z = z * self.logit_scale
                yield self.softcap * np.tanh(z / self.softcap) if self.softcap else z

        return streaming_logsumexp(chunks())

    # -- helpers

    def _restore(self, root: _Node) -> None:
        """Fill checkpoint nodes from the prefix cache; count one hit or miss per deepest checkpoint."""
        def walk(node: _Node, hit: int) -> None:
            if node.checkpoint:
                entry = self._cache_get(node.prefix())
                if entry is not None:
                    node.kv, node.hidden = entry
                    node.kv_from_start = True
                    hit = node.start + len(node.tokens)
            children = list(node.children.values())
            if node.checkpoint and not any(_has_checkpoint(c) for c in children):
                with self._lock:
                    if hit:
                        self.stats.cache_hits += 1
                        self.stats.cache_tokens_reused += hit
                    else:
                        self.stats.cache_misses += 1
            for c in children:
                walk(c, hit)

        walk(root, 0)

    @staticmethod
    def _plan(root: _Node) -> list[_Node]:
        """Nodes to compute, parents first: those not restored from the cache that have a query
        or a descendant to compute (a restored node's ancestors are not needed for it)."""
        wanted: list[_Node] = []

        def mark(node: _Node) -> bool:
            below = [mark(c) for c in node.children.values()]  # visit every child
            need = bool(node.tokens) and not node.kv_from_start and (bool(node.queries) or any(below))
            if need:
                wanted.append(node)
            return need

        mark(root)
        return wanted[::-1]  # post-order reversed: every parent before its children

    def _check_call_bytes(self, todo: list[_Node]) -> None:
        tokens = sum(len(n.tokens) for n in todo)
        need = tokens * self.backbone.kv_bytes_per_token
        if need > self.max_call_kv_bytes:
            raise EngineError(
                f"this call needs the KV cache of {tokens} distinct tokens ({need / 2**20:.0f} MiB), above the "
                f"engine's max_call_kv_bytes ({self.max_call_kv_bytes / 2**20:.0f} MiB): send fewer or shorter "
                f"requests at once, or raise the budget")

    def _pack(self, nodes: list[_Node], pending: set[_Node]) -> list[list[_Node]]:
        """Tree blocks for ``nodes`` (children of ready nodes).

        Below a ready parent, one owner's children (``build_radix_tree``) are packed as their
        pending subtrees in depth-first order, whole subtrees per block, a new block when one would
        pass ``_fits``. A child whose subtree alone does not fit runs as a block of itself (its own
        children are packed in the next round, over its KV).

        A shared child (owner None: a prefix several requests may share) is a block of its own
        that stops where requests part (``_subtree``): siblings from other requests never sit in
        its row. So every token of a request sits at the same
        column of its row whoever shares the call — a chain cut into consecutive blocks keeps its
        columns — and attention's float sums, which depend on where a token's visible columns lie,
        come out the same: INT8's per-token rounding then has nothing to tip.

        Suffixes and labels go in one block rather than one packed level each: every run streams
        all weights and copies the past once more (docs/benchmarks.md, "Tree blocks").
        """
        by_parent: dict[tuple[int, int | None], list[_Node]] = {}
        for n in nodes:
            by_parent.setdefault((id(n.parent), n.owner), []).append(n)
        items: list[list[_Node]] = []
        for (_, owner), children in by_parent.items():
            # Siblings in the parent's own order (the contexts' order), however they were found:
            # a layout must not depend on whether the parent was computed or restored.
            rank = {id(c): k for k, c in enumerate(children[0].parent.children.values())}
            children.sort(key=lambda c: rank[id(c)])
            past = children[0].start
            cur: list[_Node] = []
            for child in children:
                tree = _subtree(child, pending)
                if not self._fits(past, sum(len(n.tokens) for n in tree)):
                    items.append([child])
                elif owner is None:
                    items.append(tree)
                elif self._fits(past, sum(len(n.tokens) for n in cur + tree)):
                    cur += tree
                else:
                    items.append(cur)
                    cur = tree
            if cur:
                items.append(cur)
        return items

    def _fits(self, past: int, q: int) -> bool:
        """One row of q tokens after ``past`` within the budgets: q <= the prefill chunk and the
        batch token cap; past + present and the (q, past + q) mask and scores <= max_batch_kv_bytes."""
        per_token = self.backbone.kv_bytes_per_token
        held = 2 * (past + q) * per_token + mask_bytes(1, q, past + q, self.backbone.num_heads)
        return q <= min(self.prefill_chunk, self.max_batch_tokens) and held <= self.max_batch_kv_bytes

    def _token_groups(self, items: list[list[_Node]]) -> list[list[list[_Node]]]:
        """Split a batch of items (rows: one node, or a tree block) so that rows × longest row
        stays under ``max_batch_tokens`` and the stacked past + present of the rows (and, for a
        4-D-mask graph, the mask and one layer's scores) stay under ``max_batch_kv_bytes`` — and,
        with ``equal_pasts``, so that the rows of a run have pasts of one length. An item of at
        least ``solo_tokens`` tokens runs alone: batching it would only add padding.

        The byte bound matters for many label branches after a long prompt: 40 rows over a
        1,221-token past of the 1.5B model would stack 2.8 GB of past and get as much present back.
        """
        per_token = self.backbone.kv_bytes_per_token
        heads = self.backbone.num_heads if self.backbone.takes_tree_mask else 0
        groups: list[list[list[_Node]]] = []
        cur: list[list[_Node]] = []
        longest = past = 0
        starts = {id(it[0]): it[0].start for it in items}
        sizes = {id(it[0]): sum(len(n.tokens) for n in it) for it in items}

        def key(it: list[_Node]) -> tuple[int, int] | int:
            return (starts[id(it[0])], sizes[id(it[0])]) if self.equal_pasts else sizes[id(it[0])]

        for it in sorted(items, key=key):
            start, size = starts[id(it[0])], sizes[id(it[0])]
            if size >= self.solo_tokens:
                groups.append([it])
                continue
            longest_new, past_new = max(longest, size), max(past, start)
            rows = len(cur) + 1
            too_many_tokens = longest_new * rows > self.max_batch_tokens
            held = 2 * rows * (past_new + longest_new) * per_token
            if heads:
                held += mask_bytes(rows, longest_new, past_new + longest_new, heads)
            too_many_bytes = held > self.max_batch_kv_bytes
            other_past = self.equal_pasts and cur and start != starts[id(cur[0][0])]
            if cur and (too_many_tokens or too_many_bytes or other_past):
                groups.append(cur)
                cur, longest_new, past_new = [], size, start
            cur.append(it)
            longest, past = longest_new, past_new
        if cur:
            groups.append(cur)
        return groups

    def _run_group(self, group: list[list[_Node]]) -> None:
        """Run each item (a node's edge, or a tree block) after its parent's prefix, as one batch;
        keep each node's own KV segment (a compact copy of its columns of present) and its last
        hidden state. A lone long edge runs in chunks."""
        if len(group) == 1 and len(group[0]) == 1 and len(group[0][0].tokens) > self.prefill_chunk:
            node = group[0][0]
            segs = node.parent.path_kv() if node.parent is not None else []
            past = stack_paths([segs], self.backbone.kv_dtype) if segs else self.backbone.empty(1)
            start = past.length
            for at in range(0, len(node.tokens), self.prefill_chunk):
                run = node.tokens[at : at + self.prefill_chunk]
                # present = past + this chunk, as the graph returns it: the next chunk's past as
                # is (one row, no padding), so earlier chunks are never copied again.
                hidden, past = self._run_blocks([chain(run)], past)                      # (1, S, H)
            node.kv, node.hidden = past.slice(0, start, past.length), hidden[0, -1].copy()
            return
        paths = [it[0].parent.path_kv() if it[0].parent is not None else [] for it in group]
        blocks = [_block(it) for it in group]
        past = stack_paths(paths, self.backbone.kv_dtype) if any(paths) else self.backbone.empty(len(group))
        hidden, present = self._run_blocks(blocks, past, packed_rows=sum(len(it) > 1 for it in group))
        t = past.length
        for b, (it, block) in enumerate(zip(group, blocks)):
            for node, at in zip(it, block.offsets):
                end = at + len(node.tokens)
                node.hidden = hidden[b, end - 1].copy()
                node.kv = present.slice(b, t + at, t + end)

    def _run_blocks(self, blocks: list[Block], past: KVRows, *, packed_rows: int = 0
                    ) -> tuple[np.ndarray, KVRows]:
        """One ONNX Runtime run (one at a time, see ``_run_lock``), counted in ``stats``."""
        with self._run_lock:
            hidden, present = self.backbone.run_blocks(blocks, past)                  # (B, S, H)
        with self._lock:
            self.stats.runs += 1
            self.stats.tokens_computed += sum(len(k) for k in blocks)
            self.stats.packed_rows += packed_rows
        return hidden, present


def _subtree(node: _Node, pending: set[_Node]) -> list[_Node]:
    """``node`` and its pending descendants in depth-first preorder (a tree block's layout),
    stopping below a node where requests part: its pending children are not all one owner's
    (several shared children can only come from different requests)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        below = [c for c in n.children.values() if c in pending]
        owners = {c.owner for c in below}
        if len(below) > 1 and (len(owners) > 1 or None in owners):
            continue
        stack.extend(reversed(below))
    return out


def _block(item: list[_Node]) -> Block:
    """The row of an item: nodes in depth-first preorder whose top nodes share one parent (the past)."""
    index = {id(n): k for k, n in enumerate(item)}
    assert all(id(n.parent) in index or n.parent is item[0].parent for n in item)
    return lay_out([n.tokens for n in item], [index.get(id(n.parent), -1) for n in item])


def _packing(artifacts: Artifacts, backbone: Backbone, wanted: bool | None) -> tuple[bool, str]:
    """(use tree blocks?, why or why not). They need the 4-D mask (format version 2), and INT8 needs
    row-independent (per-token) activation scales: per-tensor scales span the whole block. INT8
    packs with one answer per request when the caller says whose each context is (``owners``, as
    the Decider does): without, a block may mix requests, whose masked columns move float sums by
    ~1e-7 and can tip a per-token rounding (0.086 measured on the tiny model, docs/benchmarks.md)."""
    if not backbone.takes_tree_mask:
        why = ("the graph's attention_mask is 2-D (an export before format version 2, a sliding-window "
               "model, whose window a 4-D mask would bypass, or an adopted graph): every node runs as a row")
        if wanted:
            raise EngineError(f"packed=True: {why}; re-export with typed-decisions export for tree blocks")
        return False, why
    if wanted is False:
        return False, "packed=False"
    if artifacts.quantization is not None and not rows_independent(artifacts) and not wanted:
        return False, ("INT8 with per-tensor activation scales: a block's scale would span other "
                       "nodes' tokens; rows stay unpacked (packed=True forces)")
    return True, "tree blocks: one row per ready node's pending subtree, one request's per row"


def _has_checkpoint(node: _Node) -> bool:
    return node.checkpoint or any(_has_checkpoint(c) for c in node.children.values())


def _concat(segments: Sequence[KVRows], dtype: np.dtype) -> KVRows:
    """One compact row from consecutive segments (a single segment is returned as is)."""
    return segments[0] if len(segments) == 1 else stack_paths([segments], dtype)


__all__ = ["Backbone", "Engine", "EngineStats", "KVRows", "build_radix_tree", "stack_paths"]
