"""The backbone: one ONNX Runtime session over the exported graph, its input and output names read
from the graph once, and one call that runs blocks of tokens after a batch of pasts."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from ..artifacts import Artifacts
from ..cpu import engine_threads
from ..errors import EngineError
from .kv import KVRows, empty_rows
from .tree_block import Block, chain, depths, tree_mask

_PAST_RE = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_MID_RE = re.compile(r"^hidden_state\.(\d+)$")  # the residual stream after k layers (docs/FORMAT.md)


class Backbone:
    """An ONNX Runtime session over the exported backbone; names read from the graph once."""

    def __init__(self, artifacts: Artifacts, *, threads: int | None = None,
                 providers: Sequence[str] | None = None):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = engine_threads(threads)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        available = ort.get_available_providers()
        if providers is None:
            providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        self.onnx_path = artifacts.graph_path  # INT8: the graph whose integer kernel is exact here
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
        # Mid-layer outputs hidden_state.{k} (graph-builder exports since 2026-12-06); none in traced
        # or adopted graphs. Read from the graph, as the KV names are: the manifest only records them.
        self.hidden_layers = tuple(sorted(int(m.group(1)) for o in self.session.get_outputs()
                                          if (m := _MID_RE.match(o.name))))
        self.output_names = (["last_hidden_state"] + [n for pair in self.present_names for n in pair]
                             + [f"hidden_state.{k}" for k in self.hidden_layers])
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
        return empty_rows(batch, self.num_layers, self.kv_heads, self.head_dim, self.kv_dtype)

    def run(self, runs: Sequence[Sequence[int]], past: KVRows) -> tuple[np.ndarray, KVRows]:
        """Feed one token run per row after ``past``; return (last-real-position hidden (B, H), present)."""
        hidden, present = self.run_blocks([chain(r) for r in runs], past)
        last = np.array([len(r) - 1 for r in runs])
        return hidden[np.arange(len(runs)), last], present                            # (B, H)

    def run_blocks(self, blocks: Sequence[Block], past: KVRows, *,
                   layers_out: list[np.ndarray] | None = None) -> tuple[np.ndarray, KVRows]:
        """Feed one block per row after ``past`` (right-padded); return (hidden (B, S, H), present).

        A chain (an ordinary run) goes to either graph; a tree block needs the 4-D mask
        (``tree_mask``). ``present.next_pos`` is meaningful for chains only. ``layers_out``, when
        given, receives the run's mid-layer states, one (B, S, H) per ``hidden_layers`` entry.
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
        n_kv = 2 * self.num_layers
        if layers_out is not None:
            layers_out.extend(out[1 + n_kv :])
        present = KVRows(list(out[1 : 1 + n_kv : 2]), list(out[2 : 1 + n_kv : 2]), mask,
                         past.next_pos + np.array([len(k) for k in blocks], np.int64))
        return out[0], present                                                         # (B, S, H)


__all__ = ["Backbone"]
