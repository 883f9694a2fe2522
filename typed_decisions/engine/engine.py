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
with one scale per token (export/…/int8/quantized_graph.py), so a row's answer does not depend on its
batch-mates or on where a cached prefix ends either; tests hold float32 and INT8 to 1e-5 alone vs
batched vs cached. Two kinds of export still run one row per call (``rows_independent``): INT8
exports made with per-tensor activation scales (before per-token quantization), and sliding-window
models, whose window counts cache slots, which padding would shift.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..artifacts import Artifacts
from ..errors import EngineError
from ..quantized import check_cpu, refuse_where_inexact
from ..readout import streaming_logsumexp
from . import schedule
from .backbone import Backbone
from .kv import KVRows, concat, stack_paths
from .prefix_cache import PrefixCache
from .radix_tree import Node, build_radix_tree, has_checkpoint
from .tree_block import Block, chain


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
    chunks of that size, and no run computes more new tokens (512: fewer masked attention scores
    than 2,048, docs/benchmarks.md). The settings are plain attributes, read at each call.
    """

    def __init__(self, artifacts: Artifacts, *, threads: int | None = None,
                 providers: Sequence[str] | None = None, cache_bytes: int = 512 << 20,
                 max_batch_rows: int | None = None, max_batch_tokens: int = 8192,
                 max_batch_kv_bytes: int = 1 << 30, max_call_kv_bytes: int = 4 << 30,
                 prefill_chunk: int = 512, cpu_check: bool = True, packed: bool | None = None,
                 solo_tokens: int = 256):
        self.artifacts = artifacts
        if cpu_check:  # an INT8 graph whose integers this CPU cannot compute is never loaded
            refuse_where_inexact(artifacts)
        self.backbone = Backbone(artifacts, threads=threads, providers=providers)
        # Tree blocks (tree_block.py) when the graph takes the 4-D mask; ``packed_reason`` says
        # why not otherwise. packed=True forces them on per-tensor INT8 (for studies), packed=False
        # turns them off.
        self.packed, self.packed_reason = packing(artifacts, self.backbone.takes_tree_mask, packed)
        self.lm_head = artifacts.lm_head                       # (vocab, H) memory-mapped
        arch = artifacts.architecture
        self.logit_scale = float(arch.logit_scale or 1.0)
        self.softcap = arch.final_logit_softcapping
        self.max_batch_rows = max_batch_rows or (32 if artifacts.rows_independent else 1)
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
        self.prefix_cache = PrefixCache(cache_bytes)
        self._lock = threading.Lock()
        # One ONNX Runtime run at a time: its intra-op pool already uses every usable core, so
        # callers on several threads (asyncio.to_thread, LangChain batch) would only oversubscribe.
        self._run_lock = threading.Lock()
        self.stats = EngineStats()
        # INT8: refuse or warn when this CPU computes other numbers than the export measured
        # (quantized.py), given this engine's logits; cpu_check=False skips it, for studies only.
        self.cpu_check = check_cpu(artifacts, self._probe_logits) if cpu_check else None

    @property
    def providers(self) -> list[str]:
        return self.backbone.providers

    @property
    def cache_bytes(self) -> int:
        """The prefix cache's byte budget (0: no cache)."""
        return self.prefix_cache.budget

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        self.prefix_cache.budget = value

    def budget(self) -> schedule.Budget:
        """This call's limits, from the engine's current settings."""
        b = self.backbone
        return schedule.Budget(b.kv_bytes_per_token, b.num_heads, b.takes_tree_mask, self.prefill_chunk,
                               self.max_batch_tokens, self.max_batch_kv_bytes, self.solo_tokens, self.equal_pasts)

    # -- the maths at the end: hidden → logits of the allowed rows only

    def logits(self, hidden: np.ndarray, allowed: Sequence[int]) -> np.ndarray:
        """``hidden (H,) @ lm_head[allowed].T`` in float64, then logit scale and soft-cap."""
        rows = np.asarray(self.lm_head[np.asarray(allowed, dtype=np.int64)], dtype=np.float64)  # (k, H)
        z = rows @ hidden.astype(np.float64) * self.logit_scale                                  # (k,)
        if self.softcap:
            z = self.softcap * np.tanh(z / self.softcap)
        return z

    def clear_cache(self) -> None:
        self.prefix_cache.clear()

    @property
    def hidden_layers(self) -> tuple[int, ...]:
        """The mid-layer states this export outputs (``hidden_state.{k}``: the residual stream after
        k decoder layers, transformers' ``hidden_states[k]``); () for traced and adopted exports."""
        return self.backbone.hidden_layers

    def require_layers(self) -> None:
        """Refuse (EngineError) when mid-layer states are asked of an export without them."""
        if not self.hidden_layers:
            raise EngineError(
                f"this export ({self.artifacts.root}) outputs no mid-layer states (hidden_state.*): it was traced, "
                f"adopted, or built before they existed or with --hidden-layers none. Heads over the last layer "
                f"work as they are; for mid-layer states re-export it with the graph builder "
                f"(typed-decisions export SOURCE --out DIR, --hidden-layers auto by default)")

    # -- the primitive

    def next_token_logits(self, contexts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]],
                          *, cache_points: Sequence[int] | Sequence[Sequence[int]] = (),
                          use_cache: bool = True, share_prefixes: bool = True,
                          owners: Sequence[int] | None = None,
                          hidden_out: list[np.ndarray] | None = None,
                          layers_out: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Logits (float64) of ``allowed[i]`` as the next token after ``contexts[i]``.

        ``cache_points`` are prefix lengths worth keeping across calls (e.g. end of the system
        prompt, end of the state): one list for every context, or one list per context (several
        requests in one call, each with its own). A call starts each context from its longest
        cached prefix and stores the others, whatever else shares the call.
        ``owners`` (one per context, e.g. its request's index) keep each owner's nodes after its
        last cache point to itself (``build_radix_tree``): its tree blocks are then laid out as if it
        came alone, which INT8 needs for one answer per request (``schedule.pack``).
        ``share_prefixes=False`` runs every context separately from scratch (the reference the
        cache-transparency tests compare against). ``hidden_out``, when given, receives each
        context's last hidden state (H,), in context order (``full_logsumexp`` reads it);
        ``layers_out`` its mid-layer states at that position (L, H), rows in ``hidden_layers``
        order (EngineError when the export has none: ``require_layers``).
        """
        if len(contexts) != len(allowed):
            raise ValueError("contexts and allowed must have the same length")
        if not contexts:
            return []
        if any(len(c) == 0 for c in contexts):
            raise ValueError("every context needs at least one token")
        if layers_out is not None:
            self.require_layers()
        with self._lock:  # counters are shared by every calling thread
            self.stats.calls += 1
            self.stats.tokens_logical += sum(len(c) for c in contexts)
        if not share_prefixes:
            out = []
            for c, a in zip(contexts, allowed):
                node = Node(tuple(c), Node((), None))
                self._run_group([[node]])
                out.append(self.logits(node.hidden, a))
                if hidden_out is not None:
                    hidden_out.append(node.hidden)
                if layers_out is not None:
                    layers_out.append(node.layers)
            return out

        per_context = bool(cache_points) and not isinstance(cache_points[0], (int, np.integer))
        points = cache_points if per_context else [cache_points] * len(contexts)
        root = build_radix_tree(contexts, points if use_cache else (), owners, points)
        if use_cache:
            self._restore(root)
        todo = schedule.plan(root)
        self._check_call_bytes(todo)
        pending = set(todo)
        # Items whose parent is ready (cached, computed, or the root), batched per run: packed,
        # each ready node's pending subtree as tree blocks; unpacked, each node a row.
        first = [n for n in todo if n.parent not in pending]
        budget = self.budget()
        level = schedule.pack(first, pending, budget) if self.packed else [[n] for n in first]
        while level:
            for start in range(0, len(level), self.max_batch_rows):
                for group in schedule.token_groups(level[start : start + self.max_batch_rows], budget):
                    self._run_group(group)
            done = [n for item in level for n in item]
            pending.difference_update(done)
            below = [c for n in done for c in n.children.values() if c in pending]
            level = schedule.pack(below, pending, budget) if self.packed else [[c] for c in below]
        if use_cache and self.cache_bytes > 0:
            per_token = self.backbone.kv_bytes_per_token
            for node in todo:  # copy a prefix's segments into one row only when the cache can hold it
                if node.checkpoint and (node.start + len(node.tokens)) * per_token <= self.cache_bytes:
                    self.prefix_cache.put(node.prefix(), concat(node.path_kv(), self.backbone.kv_dtype), node.hidden,
                                          node.layers)
        results: list[np.ndarray | None] = [None] * len(contexts)
        hiddens: list[np.ndarray | None] = [None] * len(contexts)
        layers: list[np.ndarray | None] = [None] * len(contexts)
        stack = [root]
        while stack:
            node = stack.pop()
            for q in node.queries:
                assert node.hidden is not None
                results[q] = self.logits(node.hidden, allowed[q])
                hiddens[q] = node.hidden
                layers[q] = node.layers
            stack.extend(node.children.values())
        assert all(r is not None for r in results), "a context got no logits"
        if hidden_out is not None:
            hidden_out.extend(hiddens)  # type: ignore[arg-type]
        if layers_out is not None:
            layers_out.extend(layers)  # type: ignore[arg-type]
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

    def _probe_logits(self, contexts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """The INT8 load check's probes, each its own owner: computed as recorded, alone."""
        return self.next_token_logits(contexts, allowed, use_cache=False, owners=list(range(len(contexts))))

    def _restore(self, root: Node) -> None:
        """Fill checkpoint nodes from the prefix cache; count one hit or miss per deepest checkpoint."""
        def walk(node: Node, hit: int) -> None:
            if node.checkpoint:
                entry = self.prefix_cache.get(node.prefix())
                if entry is not None:
                    node.kv, node.hidden, node.layers = entry
                    node.kv_from_start = True
                    hit = node.start + len(node.tokens)
            children = list(node.children.values())
            if node.checkpoint and not any(has_checkpoint(c) for c in children):
                with self._lock:
                    if hit:
                        self.stats.cache_hits += 1
                        self.stats.cache_tokens_reused += hit
                    else:
                        self.stats.cache_misses += 1
            for c in children:
                walk(c, hit)

        walk(root, 0)

    def _check_call_bytes(self, todo: list[Node]) -> None:
        tokens = sum(len(n.tokens) for n in todo)
        need = tokens * self.backbone.kv_bytes_per_token
        if need > self.max_call_kv_bytes:
            raise EngineError(
                f"this call needs the KV cache of {tokens} distinct tokens ({need / 2**20:.0f} MiB), above the "
                f"engine's max_call_kv_bytes ({self.max_call_kv_bytes / 2**20:.0f} MiB): send fewer or shorter "
                f"requests at once, or raise the budget")

    def _run_group(self, group: list[list[Node]]) -> None:
        """Run each item (a node's edge, or a tree block) after its parent's prefix, as one batch;
        keep each node's own KV segment (a compact copy of its columns of present), its last
        hidden state and its mid-layer states there (``at_position``). A lone long edge runs in chunks."""
        if len(group) == 1 and len(group[0]) == 1 and len(group[0][0].tokens) > self.prefill_chunk:
            node = group[0][0]
            segs = node.parent.path_kv() if node.parent is not None else []
            past = stack_paths([segs], self.backbone.kv_dtype) if segs else self.backbone.empty(1)
            start = past.length
            for at in range(0, len(node.tokens), self.prefill_chunk):
                run = node.tokens[at : at + self.prefill_chunk]
                # present = past + this chunk, as the graph returns it: the next chunk's past as
                # is (one row, no padding), so earlier chunks are never copied again.
                mids: list[np.ndarray] = []
                hidden, past = self._run_blocks([chain(run)], past, layers_out=mids)     # (1, S, H)
            node.kv, node.hidden = past.slice(0, start, past.length), hidden[0, -1].copy()
            node.layers = at_position(mids, 0, -1)
            return
        paths = [it[0].parent.path_kv() if it[0].parent is not None else [] for it in group]
        blocks = [schedule.block(it) for it in group]
        past = stack_paths(paths, self.backbone.kv_dtype) if any(paths) else self.backbone.empty(len(group))
        mids: list[np.ndarray] = []
        hidden, present = self._run_blocks(blocks, past, packed_rows=sum(len(it) > 1 for it in group),
                                           layers_out=mids)
        t = past.length
        for b, (it, block) in enumerate(zip(group, blocks)):
            for node, at in zip(it, block.offsets):
                end = at + len(node.tokens)
                node.hidden = hidden[b, end - 1].copy()
                node.layers = at_position(mids, b, end - 1)
                node.kv = present.slice(b, t + at, t + end)

    def _run_blocks(self, blocks: list[Block], past: KVRows, *, packed_rows: int = 0,
                    layers_out: list[np.ndarray] | None = None) -> tuple[np.ndarray, KVRows]:
        """One ONNX Runtime run (one at a time, see ``_run_lock``), counted in ``stats``."""
        with self._run_lock:
            hidden, present = self.backbone.run_blocks(blocks, past, layers_out=layers_out)  # (B, S, H)
        with self._lock:
            self.stats.runs += 1
            self.stats.tokens_computed += sum(len(k) for k in blocks)
            self.stats.packed_rows += packed_rows
        return hidden, present


def at_position(layers: Sequence[np.ndarray], b: int, pos: int) -> np.ndarray | None:
    """The mid-layer states of row b at one position, (L, H), a compact copy (the run's (B, S, H)
    outputs are not kept alive); None when the graph has no mid-layer outputs.

    >>> at_position([np.arange(12.).reshape(1, 3, 4), -np.arange(12.).reshape(1, 3, 4)], 0, 1)
    array([[ 4.,  5.,  6.,  7.],
           [-4., -5., -6., -7.]])
    """
    return np.stack([a[b, pos] for a in layers]) if layers else None                    # (L, H)


def packing(artifacts: Artifacts, takes_tree_mask: bool, wanted: bool | None) -> tuple[bool, str]:
    """(use tree blocks?, why or why not). They need the 4-D mask (format version 2), and INT8 needs
    row-independent (per-token) activation scales: per-tensor scales span the whole block. INT8
    packs with one answer per request when the caller says whose each context is (``owners``, as
    the Decider does): without, a block may mix requests, whose masked columns move float sums by
    ~1e-7 and can tip a per-token rounding (0.086 measured on the tiny model, docs/benchmarks.md)."""
    if not takes_tree_mask:
        why = ("the graph's attention_mask is 2-D (an export before format version 2, a sliding-window "
               "model, whose window a 4-D mask would bypass, or an adopted graph): every node runs as a row")
        if wanted:
            raise EngineError(f"packed=True: {why}; re-export with typed-decisions export for tree blocks")
        return False, why
    if wanted is False:
        return False, "packed=False"
    if artifacts.quantization is not None and not artifacts.rows_independent and not wanted:
        return False, ("INT8 with per-tensor activation scales: a block's scale would span other "
                       "nodes' tokens; rows stay unpacked (packed=True forces)")
    return True, "tree blocks: one row per ready node's pending subtree, one request's per row"


__all__ = ["Engine", "EngineStats", "at_position", "packing"]
