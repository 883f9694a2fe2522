"""How much disk an export writes, known from the DecoderSpec before any tensor is read, and the
check that refuses an export its file system cannot hold (issue #32: a 7B float export is ~30 GB;
running out of disk half-way leaves a broken directory after minutes of work).

    float32 bytes = 4 · (embedding V·H + per layer (q, k, v, o, gate, up, down, norms) + final norm)
                  + 4 · V·H for lm_head.npy (the readout's rows; written even when tied)
    INT8 adds     = the INT8 graph's data: 1 byte per MatMul weight and the embedding kept in
                    float32, written while the float export still exists (scales: in the margin)
    INT8 written straight from the source (int8/direct.py): no float32 graph; the INT8 graph's
                    data (every down_proj float32), lm_head.npy, and one segment of the float
                    reference at a time (int8/float_reference.py, SEGMENT_BYTES)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import ExportError
from .spec import DecoderSpec, Layer

MARGIN = 1.05  # graph protos, tokenizer, alignment padding, the manifest


def layer_weights(spec: DecoderSpec, layer: Layer) -> tuple[int, int]:
    """(MatMul weight elements, vector elements: norms and biases) of one decoder layer."""
    h, q_dim, kv_dim, inter = spec.hidden_size, spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim, \
        spec.intermediate_size
    matmul = h * q_dim + 2 * h * kv_dim + q_dim * h + 3 * h * inter
    norms = [layer.input_norm, layer.post_attention_norm, layer.pre_mlp_norm, layer.post_mlp_norm]
    vectors = h * sum(n is not None for n in norms) + spec.head_dim * (layer.q_norm is not None) \
        + spec.head_dim * (layer.k_norm is not None)
    vectors += sum(dim for proj, dim in ((layer.q, q_dim), (layer.k, kv_dim), (layer.v, kv_dim), (layer.o, h))
                   if proj.bias is not None)
    return matmul, vectors


def export_bytes(spec: DecoderSpec, *, int8: bool = False, direct: bool = False, segment_bytes: int = 0) -> int:
    """Bytes the export writes at its fullest (module docstring), with a 5 % margin; `direct`: INT8
    written straight from the source, whose float reference writes `segment_bytes` of float32
    weights at a time (int8/float_reference.py's SEGMENT_BYTES, at least one layer)."""
    embed = spec.vocab_size * spec.hidden_size
    per_layer = [layer_weights(spec, layer) for layer in spec.layers]
    matmul = sum(m for m, _ in per_layer)
    vectors = sum(v for _, v in per_layer) + spec.hidden_size
    if int8 and direct:
        down = spec.num_layers * spec.hidden_size * spec.intermediate_size  # float32 in the INT8 graph
        largest_layer = 4 * max(m + v for m, v in per_layer)
        total = 4 * embed + (matmul - down) + 4 * down + 4 * vectors + 4 * embed + max(segment_bytes, largest_layer)
        return int(total * MARGIN)
    total = 4 * (embed + matmul + vectors) + 4 * embed  # model.onnx.data + lm_head.npy
    if int8:
        total += matmul + 4 * embed
    return int(total * MARGIN)


def check_disk(out_dir: Path, spec: DecoderSpec, *, int8: bool = False, direct: bool = False,
               segment_bytes: int = 0) -> int:
    """Refuse (ExportError, before anything is written) when `out_dir`'s file system has less free
    space than the export needs (export_bytes); returns the bytes needed."""
    need = export_bytes(spec, int8=int8, direct=direct, segment_bytes=segment_bytes)
    probe = Path(out_dir)
    while not probe.exists():  # the directory may not exist yet: its nearest existing parent's disk
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise ExportError(
            f"{out_dir}: this export writes about {need / 1e9:.2f} GB "
            f"({('INT8' if direct else 'float32 + INT8') if int8 else 'float32'}, "
            f"{spec.num_layers} layers, hidden {spec.hidden_size}, vocab {spec.vocab_size}) and its file system has "
            f"{free / 1e9:.2f} GB free: free some space or export to another directory (--out)")
    return need
