"""The float32 reference of an INT8 export written straight from the source (direct.py), with no
float32 export on disk and never the whole float model in memory (issue #32).

The drift probe compares INT8 with float32 on the probes (drift.py). Without a float32 export, the
float32 side is the graph builder's own float graph, written and run a segment of layers at a time:

    segment s = layers [a, b) of the same DecoderSpec, written by builder/decoder.py (the first
                segment with the embedding, cut to the rows the probes use; the last with the
                final norm), from the same source tensors, into a scratch folder;
    for each run (a probe alone, the probes batched, a prefix and its cached step):
        x_run <- segment s (x_run, past = that run's parent's present of layers [a, b))
    then the segment's files and session are dropped.

So every run goes through the very graph the float32 export would hold, layer for layer, and only
one segment's weights (SEGMENT_BYTES of float32) and the runs' hidden states are held at a time.
Each run's hidden state crosses a segment boundary as float32, as it crosses a layer boundary in the
whole graph: the tables equal the whole float graph's to within ONNX Runtime's fusion of
neighbouring layers (tested at 1e-5 on the tiny models).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..builder.decoder import write_backbone
from ..builder.disk import layer_weights
from ..prefix_check import VocabSlice
from .drift import CACHED_STEP, Probe, batched_inputs, cached_step

SEGMENT_BYTES = 1 << 30  # float32 weights of one segment (at least one layer)
SCRATCH_PREFIX = ".float-reference-"  # a dot-folder in the export directory: never hashed, deleted after


def segments(spec: Any, budget: int = SEGMENT_BYTES) -> list[tuple[int, int]]:
    """Consecutive layer ranges [a, b) whose float32 weights fit in `budget` bytes (one layer each
    at least), covering every layer (tests/export/test_int8_direct.py)."""
    out, start, size = [], 0, 0
    for i, layer in enumerate(spec.layers):
        matmul, vectors = layer_weights(spec, layer)
        nbytes = 4 * (matmul + vectors)
        if i > start and size + nbytes > budget:
            out.append((start, i))
            start, size = i, 0
        size += nbytes
    out.append((start, len(spec.layers)))
    return out


@dataclass
class Run:
    """One run of the backbone: inputs as OrtBackbone.run takes them, and the run whose present is
    its past (None: an empty past). `hidden` is filled by run_segmented: last_hidden_state (B, T, H)."""

    ids: np.ndarray  # (B, T) int64, source token ids
    mask: np.ndarray  # (B, P + T) int64 padding mask
    pos: np.ndarray  # (B, T) int64
    parent: int | None = None
    hidden: np.ndarray | None = None


def _feeds(session: Any, spec: Any, run: Run, ids: np.ndarray, x: np.ndarray | None,
           past: list[np.ndarray]) -> dict[str, np.ndarray]:
    from typed_decisions.engine.tree_block import causal_mask

    seq = run.ids.shape[1]
    feed = {"input_ids": ids, "position_ids": run.pos.astype(np.int64),
            "attention_mask": causal_mask(run.mask, seq) if spec.mask == "4d" else run.mask.astype(np.int64)}
    if x is not None:
        feed["inputs_embeds"] = x
    names = [f"past_key_values.{i}.{t}" for i in range(len(past) // 2) for t in ("key", "value")]
    feed.update(zip(names, past))
    wanted = {i.name for i in session.get_inputs()}
    return {k: v for k, v in feed.items() if k in wanted}


def run_segmented(spec: Any, tensors: Any, runs: list[Run], scratch: Path, *, budget: int = SEGMENT_BYTES,
                  log=print) -> None:
    """Fill each run's `hidden` through the float32 graph of `spec`, written from `tensors` and run
    a segment of layers at a time (module docstring). A run's parent comes before it in `runs`."""
    from ..ort_backbone import cpu_session

    vocab = sorted({int(t) for r in runs for t in r.ids.ravel()})
    index = {t: j for j, t in enumerate(vocab)}
    sliced = VocabSlice(tensors, {spec.embed}, vocab)
    children = {r.parent for r in runs if r.parent is not None}
    ids = [np.vectorize(index.__getitem__, otypes=[np.int64])(r.ids) for r in runs]  # in the sliced vocabulary
    xs: list[np.ndarray | None] = [None] * len(runs)
    parts = segments(spec, budget)
    kv, d = spec.num_kv_heads, spec.head_dim
    for s, (a, b) in enumerate(parts):
        log(f"float reference: layers {a}-{b - 1} of {spec.num_layers} (segment {s + 1} of {len(parts)}) ...")
        part = replace(spec, layers=spec.layers[a:b], vocab_size=len(vocab))
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=scratch) as folder:
            path = Path(folder) / "segment.onnx"
            write_backbone(part, sliced, path, log=lambda m: None, hidden_input=a > 0, final_norm=b == spec.num_layers)
            session = cpu_session(path)
            presents: dict[int, list[np.ndarray]] = {}
            for r, run in enumerate(runs):
                batch = run.ids.shape[0]
                past = (presents[run.parent] if run.parent is not None
                        else [np.zeros((batch, kv, 0, d), np.float32) for _ in range(2 * (b - a))])
                x, *present = session.run(None, _feeds(session, spec, run, ids[r], xs[r], past))
                xs[r] = x
                if r in children:
                    presents[r] = present
            del session, presents
    for run, x in zip(runs, xs):
        run.hidden = x


def probe_tables(spec: Any, tensors: Any, probe: Probe, prompts: list[list[int]], scratch: Path, *,
                 budget: int = SEGMENT_BYTES, log=print) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32's (alone, batched, cached) probability tables of drift.Probe on `prompts`, each
    (N, K), computed through run_segmented: the same runs Probe makes on a whole graph."""
    alone = [Run(np.array([p]), np.ones((1, len(p)), np.int64), np.arange(len(p))[None]) for p in prompts]
    ids, mask, pos, last = batched_inputs(prompts, probe.pad_id)
    batched = [Run(ids, mask, pos)]
    cached: list[Run] = []
    for p in prompts:
        n = len(p) - CACHED_STEP
        cached.append(Run(np.array([p[:n]]), np.ones((1, n), np.int64), np.arange(n)[None]))
        cached.append(Run(*cached_step(p), parent=len(alone) + len(batched) + len(cached) - 1))
    runs = alone + batched + cached
    run_segmented(spec, tensors, runs, scratch, budget=budget, log=log)
    t_alone = np.concatenate([probe.probs(r.hidden[:, -1]) for r in alone])
    t_batched = probe.probs(batched[0].hidden[np.arange(len(prompts)), last])
    t_cached = np.concatenate([probe.probs(r.hidden[:, -1]) for r in cached[1::2]])
    return t_alone, t_batched, t_cached
