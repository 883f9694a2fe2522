"""The self-check of a builder export in bounded memory: the same checks, on a prefix of the model.

The full self-check (selfcheck.py) runs transformers and ONNX Runtime on the whole float32 model:
twice the model's size in memory. For a builder export it runs instead on

- a prefix graph: the same builder, the same DecoderSpec cut to its first `prefix_layers(spec)`
  layers (every distinct layer kind, at least 2, so a cache and a residual cross a layer boundary)
  plus the final norm, and to the vocabulary the check's sequences and candidates use (token
  `ids[j]` becomes token j: the embedding and LM head rows `ids`), written from the same source
  tensors into a scratch folder inside the export directory;
- its oracle: transformers' model of that same prefix (prefix_reference.py), filled by
  transformers' own loading rules, not by the builder;

with every pattern of selfcheck.py (prefill, left-padded batch, cached steps, right-padded suffixes,
the tokenizer, the LM head's soft-cap and scale from the manifest's architecture). Then the prefix
graph's weights are compared byte for byte with the full export's (every tensor of those layers,
the final norm, the embedding and lm_head.npy rows), so the files that ship are the ones checked.

For an INT8 export written straight from the source (int8/direct.py) the full export holds each
quantized MatMul weight as integers and scales: those are compared with the prefix graph's float
weight quantized again (weights_differing's `weight_levels`).

What it does not see: a tensor of a later layer read wrongly in a way no earlier layer shows (each
layer is written by the same code from names built the same way; a corrupt tensor is refused as
it is read). Memory: the prefix twice (transformers, ONNX Runtime), never the whole model.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .selfcheck import CheckPlan, run_self_check, torch_references

SCRATCH_PREFIX = ".selfcheck-prefix-"  # a dot-folder: never hashed into the manifest, deleted after


def prefix_layers(spec: Any, minimum: int = 2) -> int:
    """The shortest prefix holding every distinct layer kind (window, RoPE, norms), at least `minimum`."""
    seen, last = set(), 0
    for i, layer in enumerate(spec.layers):
        kind = (layer.sliding_window, layer.rope.key if layer.rope else None, layer.q_norm is not None,
                layer.pre_mlp_norm is not None, layer.q.bias is not None)
        if kind not in seen:
            seen.add(kind)
            last = i
    return min(spec.num_layers, max(minimum, last + 1))


def vocabulary(plan: CheckPlan) -> list[int]:
    """Every token id the check feeds or reads, sorted."""
    ids = {t for seq in plan.prompts + plan.suffixes for t in seq} | set(plan.candidates) | {plan.pad_id}
    return sorted(ids)


def remap(plan: CheckPlan, ids: list[int]) -> CheckPlan:
    """The plan on the prefix vocabulary: token ids[j] -> j."""
    m = {t: j for j, t in enumerate(ids)}
    return replace(plan, prompts=[[m[t] for t in p] for p in plan.prompts],
                   suffixes=[[m[t] for t in s] for s in plan.suffixes],
                   candidates=[m[c] for c in plan.candidates], pad_id=m[plan.pad_id])


class VocabSlice:
    """A builder tensor source whose embedding and LM head are the rows `ids`."""

    def __init__(self, tensors: Any, names: set[str], ids: list[int]):
        self.tensors, self.names_sliced, self.ids = tensors, names, ids

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str, expect: tuple[int, ...] | None = None) -> np.ndarray:
        if name not in self.names_sliced:
            return self.tensors.get(name, expect)
        if hasattr(self.tensors, "get_rows"):
            rows = self.tensors.get_rows(name, self.ids)
        else:
            rows = self.tensors.get(name)[self.ids]
        if expect is not None and tuple(expect) != rows.shape:
            raise ValueError(f"{name}: prefix rows {rows.shape}, expected {expect}")
        return np.ascontiguousarray(rows)


def _initializers(onnx_path: Path) -> tuple[dict[str, tuple[Path, int, int, tuple[int, ...]]], dict[str, Any]]:
    """(name -> (data file, offset, length, dims) of every external initializer, name -> TensorProto
    of every inline one)."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    out, inline = {}, {}
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            out[t.name] = (onnx_path.parent / info["location"], int(info.get("offset", 0)), int(info["length"]),
                           tuple(t.dims))
        else:
            inline[t.name] = t
    return out, inline


def _same_integers(full: dict, inline: dict, name: str, where: tuple, levels: int) -> bool:
    """Whether the INT8 graph's `name`_quantized and `name`_scale are the checked float weight
    `where` quantized per column again (int8/integer.py)."""
    from onnx import numpy_helper

    from .int8.integer import quantize_weight_per_column

    w = _read(where).view(np.float32).reshape(where[3])
    wq, scale = quantize_weight_per_column(w, levels)
    q, s = full.get(f"{name}_quantized"), inline.get(f"{name}_scale")
    return (q is not None and s is not None and q[3] == wq.shape and np.array_equal(_read(q).view(np.int8), wq.ravel())
            and np.array_equal(numpy_helper.to_array(s), scale))


def _read(where: tuple[Path, int, int, tuple[int, ...]], start: int = 0, length: int | None = None) -> np.ndarray:
    path, offset, size, _ = where
    length = size - start if length is None else length
    return np.fromfile(path, dtype=np.uint8, count=length, offset=offset + start)


def weights_differing(full_dir: Path, prefix_dir: Path, embed: str, ids: list[int], *, onnx_file: str = "model.onnx",
                      weight_levels: int | None = None) -> tuple[int, list[str]]:
    """(tensors compared, names that differ) between the prefix graph and the full export: every
    prefix weight by name, the embedding's rows `ids`, and lm_head.npy's rows `ids`. An INT8 export
    written from the source (`weight_levels`: its weights' levels) holds a quantized MatMul weight
    as integers and scales: those must be the prefix's float weight quantized again."""
    (full, inline), (small, _) = _initializers(full_dir / onnx_file), _initializers(prefix_dir / "model.onnx")
    differ, compared = [], 0
    for name, where in small.items():
        if name not in full and weight_levels is not None and f"{name}_quantized" in full:
            compared += 1
            if not _same_integers(full, inline, name, where, weight_levels):
                differ.append(f"{name} (int8)")
            continue
        if name not in full:
            differ.append(f"{name} (not in the full export)")
            continue
        compared += 1
        if name == embed:
            row = where[2] // len(ids)
            same = all(np.array_equal(_read(full[name], i * row, row), _read(where, j * row, row))
                       for j, i in enumerate(ids))
        else:
            same = full[name][2] == where[2] and np.array_equal(_read(full[name]), _read(where))
        if not same:
            differ.append(name)
    head, small_head = np.load(full_dir / "lm_head.npy", mmap_mode="r"), np.load(prefix_dir / "lm_head.npy")
    compared += 1
    if not np.array_equal(np.asarray(head[ids]), small_head):
        differ.append("lm_head.npy")
    return compared, differ


def run_prefix_check(out_dir: Path, spec: Any, source: Any, architecture: dict[str, Any], plan: CheckPlan,
                     *, log=print, opset: int = 18, onnx_file: str = "model.onnx",
                     weight_levels: int | None = None) -> dict[str, Any]:
    """The self-check of the builder export in `out_dir` on a prefix model (the module docstring);
    returns the manifest's `self_check`, with `prefix` saying what was checked. `onnx_file`,
    `weight_levels`: an INT8 export written from the source (weights_differing)."""
    import gc

    from .builder import _lm_head_name
    from .builder.decoder import write_backbone
    from .prefix_reference import prefix_model

    n, ids = prefix_layers(spec), vocabulary(plan)
    head = _lm_head_name(spec, source.tensors)
    small_spec = replace(spec, layers=spec.layers[:n], vocab_size=len(ids))
    small_plan = remap(plan, ids)
    log(f"self-check: on a prefix of {n} of {spec.num_layers} layers and {len(ids)} of {spec.vocab_size} tokens "
        f"(bounded memory) ...")
    model = prefix_model(source.kind, source.path, source.transformers_config(), n, ids,
                         reader=getattr(source.tensors, "reader", None))
    refs = torch_references(model, small_plan.reference_sequences(), small_plan.candidates)
    del model
    gc.collect()
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=out_dir) as scratch:
        scratch = Path(scratch)
        tensors = VocabSlice(source.tensors, {spec.embed, head}, ids)
        write_backbone(small_spec, tensors, scratch / "model.onnx", opset=opset, log=lambda m: None)
        np.save(scratch / "lm_head.npy", tensors.get(head, (len(ids), spec.hidden_size)))
        small_arch = dict(architecture, num_layers=n, vocab_size=len(ids))
        check = run_self_check(scratch, "model.onnx", small_arch, small_plan, refs, log=log)
        compared, differ = weights_differing(out_dir, scratch, spec.embed, ids, onnx_file=onnx_file,
                                             weight_levels=weight_levels)
    if differ:
        check["failures"].append(f"weights: the full export's {', '.join(differ[:5])} differ from the checked prefix")
        check["passed"] = False
    check["reference"] = (f"transformers on the first {n} of {spec.num_layers} layers (+ final norm) and {len(ids)} "
                          f"tokens, weights loaded by transformers' rules; one unpadded sequence, no cache")
    check["prefix"] = {"layers": n, "of_layers": spec.num_layers, "tokens": len(ids), "weights_compared": compared,
                       "weights_differing": differ}
    return check
