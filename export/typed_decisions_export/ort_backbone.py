"""A minimal ONNX Runtime driver for an exported backbone, plus the candidate-logit readout.

This mirrors what the runtime does (docs/FORMAT.md) so that the self-check and the INT8 drift probe
exercise the exported files the same way: prefill with an empty past, cached suffix steps, and
`logits = hidden[:, -1] @ lm_head[candidates].T * logit_scale`, soft-capped when the model says so.
It is test machinery for the exporter, not the runtime's engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def cpu_session(onnx_path: Path, *, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session with the runtime's thread count (``typed_decisions.cpu.engine_threads``:
    ``threads``, else ``TYPED_DECISIONS_THREADS``, else the cores this process may use). ONNX Runtime's
    own default is every physical core of the machine, which oversubscribes processes that share the
    cores (test workers, a container's quota)."""
    import onnxruntime as ort

    from typed_decisions.cpu import engine_threads

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = engine_threads(threads)
    return ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])


class OrtBackbone:
    """One InferenceSession over `model*.onnx`, with past/present tensors found by their names."""

    def __init__(self, onnx_path: Path, *, threads: int | None = None):
        self.session = cpu_session(onnx_path, threads=threads)
        self.input_names = [i.name for i in self.session.get_inputs()]
        # last_hidden_state and present.* in the graph's order; a builder graph's mid-layer outputs
        # (hidden_state.{k}, docs/FORMAT.md) are not fetched here: the checks compare the format's core.
        self.output_names = [o.name for o in self.session.get_outputs() if not o.name.startswith("hidden_state.")]
        past = [i for i in self.session.get_inputs() if i.name.startswith("past_key_values.")]
        self.num_layers = len(past) // 2
        self.num_kv_heads, self.head_dim = int(past[0].shape[1]), int(past[0].shape[3])
        mask = next(i for i in self.session.get_inputs() if i.name == "attention_mask")
        self.mask_4d = len(mask.shape) == 4  # format version 2: (B, 1, T, P + T) bool

    def mask_feed(self, attention_mask: np.ndarray, seq: int) -> np.ndarray:
        """The graph's attention_mask from a 2-D padding mask (B, P + T): as is, or its causal 4-D form."""
        from typed_decisions.engine.tree_block import causal_mask

        return causal_mask(attention_mask, seq) if self.mask_4d else attention_mask.astype(np.int64)

    def empty_past(self, batch: int) -> list[np.ndarray]:
        """Flat past with past_seq = 0: [(B, kv_heads, 0, head_dim)] * 2 * num_layers."""
        return [np.zeros((batch, self.num_kv_heads, 0, self.head_dim), np.float32) for _ in range(2 * self.num_layers)]

    def run(
        self,
        input_ids: np.ndarray,  # (B, T) int64
        attention_mask: np.ndarray,  # (B, P + T) int64 (made 4-D here when the graph takes that)
        position_ids: np.ndarray,  # (B, T) int64
        past: list[np.ndarray] | None = None,  # 2 * num_layers of (B, kv_heads, P, head_dim)
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Returns (last_hidden_state (B, T, hidden), flat present (B, kv_heads, P + T, head_dim) each)."""
        batch, seq = input_ids.shape
        past = self.empty_past(batch) if past is None else past
        feed: dict[str, Any] = {
            "input_ids": input_ids.astype(np.int64),
            "attention_mask": self.mask_feed(attention_mask, seq),
            "position_ids": position_ids.astype(np.int64),
        }
        feed.update(zip(self.input_names[3:], past))
        hidden, *present = self.session.run(self.output_names, feed)
        want = past[0].shape[2] + seq
        # The format promises one length for every present (no sliding-window truncation).
        if any(p.shape[2] != want for p in present):
            raise AssertionError(f"present lengths {sorted({p.shape[2] for p in present})} != past + seq = {want}")
        return hidden, present

    def prefill(self, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One unpadded sequence from an empty past: (hidden (1, T, H), present)."""
        n = len(ids)
        return self.run(np.array([ids]), np.ones((1, n), np.int64), np.arange(n)[None])


def left_padded(seqs: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left-pad token lists into (input_ids, attention_mask, position_ids), all (B, T).

    >>> ids, mask, pos = left_padded([[5, 6, 7], [8]], pad_id=0)
    >>> ids.tolist(), mask.tolist(), pos.tolist()
    ([[5, 6, 7], [0, 0, 8]], [[1, 1, 1], [0, 0, 1]], [[0, 1, 2], [1, 1, 0]])
    """
    width = max(len(s) for s in seqs)
    ids = np.full((len(seqs), width), pad_id, np.int64)
    mask = np.zeros((len(seqs), width), np.int64)
    for row, s in enumerate(seqs):
        ids[row, width - len(s) :] = s
        mask[row, width - len(s) :] = 1
    # Real tokens count from 0; pads get position 1 as transformers does (they are masked anyway).
    pos = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
    return ids, mask, pos


def candidate_logits(
    hidden: np.ndarray,  # (B, H): hidden state at each row's last real position
    lm_head: np.ndarray,  # (V, H)
    candidates: list[int],
    *,
    logit_scale: float = 1.0,
    softcap: float | None = None,
) -> np.ndarray:
    """(B, K) logits of the K candidate tokens: (h @ W[c].T) * logit_scale, then c * tanh(x / c)."""
    logits = hidden.astype(np.float64) @ lm_head[candidates].astype(np.float64).T * logit_scale  # (B, K)
    if softcap:
        logits = softcap * np.tanh(logits / softcap)
    return logits


def restricted_softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (the candidates only): (B, K) -> (B, K), rows sum to 1."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def right_padded_suffixes(ort: OrtBackbone, common: list[int], suffixes: list[list[int]], pad_id: int) -> np.ndarray:
    """`suffixes` as cached steps on one shared past (`common`, prefilled once), right-padded in
    one batch: each row's hidden state at its own last real position, (B, H)."""
    _, present = ort.prefill(common)
    width, p = max(len(s) for s in suffixes), len(common)
    ids_r = np.full((len(suffixes), width), pad_id, np.int64)
    mask_r = np.zeros((len(suffixes), p + width), np.int64)
    mask_r[:, :p] = 1
    for i, s in enumerate(suffixes):
        ids_r[i, : len(s)] = s
        mask_r[i, p : p + len(s)] = 1
    pos_r = np.broadcast_to(np.arange(p, p + width), ids_r.shape).copy()  # (B, T)
    past_b = [np.repeat(t, len(suffixes), axis=0) for t in present]  # (B, kv, P, hd)
    hidden, _ = ort.run(ids_r, mask_r, pos_r, past_b)
    return np.stack([hidden[i, len(s) - 1] for i, s in enumerate(suffixes)])  # (B, H)
