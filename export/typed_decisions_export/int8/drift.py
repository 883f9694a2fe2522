"""The drift probe: float32 against INT8 on a fixed probe set (measure, compare, Probe), each
graph's dependence on batching and cache splits, and what the runtime re-runs at load on another
CPU class (load_check).

Drift is measured on a fixed probe set (8 lettered multiple-choice questions, candidates the
tokens of 'A'..'E'): float32 ONNX vs INT8 ONNX, softmax restricted to the candidates. Refused
(INT8 files removed, QuantizationError) when any probability moves by more than 0.10, or when a
top-1 answer flips although float32 preferred it by a margin of at least 0.20 (a "decisive" flip;
near-ties may flip within the 0.10 tolerance), unless `force`.

With per-token scales the INT8 graph depends on neither batching nor cache splits; both are
measured and recorded (`batch_dependence`, `cache_dependence`) next to the same numbers for
float32, and for the per-tensor scheme (quantize_dynamic's pattern, kept as the documented
negative in export/studies/int8_variants.py) they are not zero.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from typed_decisions.cpu import describe as cpu_describe

from ..ort_backbone import OrtBackbone, candidate_logits, restricted_softmax
from ..tokenizer_files import CHAT_TEMPLATE_FILE, TOKENIZER_FILE

THRESHOLD = {"max_abs_prob": 0.10, "decisive_flips": 0}
# A flip counts against INT8 only when float32 preferred its answer by at least this much: with
# every probability allowed to move by 0.10, a top-2 margin under 0.20 can flip within tolerance,
# and such near-ties say nothing about whether INT8 changed the model's mind.
DECISIVE_MARGIN = 0.20

PROBE_SYSTEM = "Answer with the letter of the correct option only."
PROBES = [
    "Which planet is closest to the Sun? A) Venus B) Mercury C) Mars D) Earth E) Jupiter",
    "What is 6 times 7? A) 42 B) 36 C) 48 D) 13 E) 67",
    "Which of these is a prime number? A) 21 B) 27 C) 29 D) 33 E) 39",
    "Water boils at sea level at A) 50 C B) 75 C C) 90 C D) 100 C E) 120 C",
    "Which word is a verb? A) table B) quickly C) run D) blue E) under",
    "Which language runs natively in web browsers? A) COBOL B) JavaScript C) Fortran D) Ada E) Lisp",
    "What does HTTP status 404 mean? A) OK B) moved C) not found D) server error E) unauthorized",
    "Which is the largest ocean? A) Atlantic B) Indian C) Arctic D) Pacific E) Southern",
]
CANDIDATE_TEXTS = ["A", "B", "C", "D", "E"]
CACHED_STEP = 3  # the cache-dependence pattern: a prefix prefilled, then its last tokens as one cached step
LOAD_CHECK_PROBES = 2  # probes the runtime re-runs at load on a CPU class other than the one measured


def probe_tokenizer(export_dir: Path, facts: dict[str, Any]) -> Any:
    """A transformers tokenizer rebuilt from the exported files only (what the runtime has)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(export_dir / TOKENIZER_FILE),
        bos_token=facts["bos_token"],
        eos_token=facts["eos_token"],
        pad_token=facts["pad_token"],
    )
    template = export_dir / CHAT_TEMPLATE_FILE
    if facts.get("chat_template_file") and template.is_file():
        tok.chat_template = template.read_text(encoding="utf-8")
    return tok


class Probe:
    """Restricted-softmax probabilities of the probe set through one ORT backbone."""

    def __init__(self, lm_head: np.ndarray, cands: list[int], arch: dict[str, Any], pad_id: int):
        self.lm_head, self.cands, self.arch, self.pad_id = lm_head, cands, arch, pad_id

    def probs(self, hidden_rows: np.ndarray) -> np.ndarray:  # (B, H) -> (B, K)
        logits = candidate_logits(
            hidden_rows.astype(np.float64),
            self.lm_head,
            self.cands,
            logit_scale=self.arch["logit_scale"],
            softcap=self.arch["final_logit_softcapping"],
        )
        return restricted_softmax(logits)

    def alone(self, ort: OrtBackbone, prompts: list[list[int]]) -> np.ndarray:  # (N, K)
        return np.concatenate([self.probs(ort.prefill(ids)[0][:, -1]) for ids in prompts])

    def batched(self, ort: OrtBackbone, prompts: list[list[int]]) -> np.ndarray:  # (N, K)
        """All probes in one run, right-padded as the runtime batches rows (batched_inputs)."""
        ids, mask, pos, last = batched_inputs(prompts, self.pad_id)
        hidden, _ = ort.run(ids, mask, pos)
        return self.probs(hidden[np.arange(len(prompts)), last])

    def cached(self, ort: OrtBackbone, prompts: list[list[int]], k: int = CACHED_STEP) -> np.ndarray:  # (N, K)
        rows = []
        for ids in prompts:
            n = len(ids) - k
            _, present = ort.prefill(ids[:n])
            hidden, _ = ort.run(*cached_step(ids, k), present)
            rows.append(self.probs(hidden[:, -1]))
        return np.concatenate(rows)



def batched_inputs(prompts: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, attention_mask, position_ids, each row's last real position) of the prompts in
    one run, right-padded as the runtime batches rows (padding after each row's tokens, so a row's
    keys keep their places).

    >>> ids, mask, pos, last = batched_inputs([[5, 6, 7], [8]], pad_id=0)
    >>> ids.tolist(), mask.tolist(), last.tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]], [2, 0])
    """
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for row, p in enumerate(prompts):
        ids[row, : len(p)], mask[row, : len(p)] = p, 1
    pos = np.tile(np.arange(width, dtype=np.int64), (len(prompts), 1))
    return ids, mask, pos, np.array([len(p) - 1 for p in prompts])


def cached_step(ids: list[int], k: int = CACHED_STEP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, attention_mask, position_ids) of a prompt's last `k` tokens as one step on the
    cache of the others (prefilled alone)."""
    n = len(ids) - k
    return np.array([ids[n:]]), np.ones((1, n + k), np.int64), np.arange(n, n + k)[None]


def compare(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """How far table b (N, K) moved from reference table a: max abs probability difference, top-1
    flips, and the flips where a's own top-2 margin was at least DECISIVE_MARGIN.

    >>> a = np.array([[0.65, 0.35], [0.51, 0.49]]); b = np.array([[0.35, 0.65], [0.48, 0.52]])
    >>> compare(a, b) == {"max_abs_prob": 0.3, "top1_flips": 2, "decisive_flips": 1}
    True
    """
    top2 = np.sort(a, axis=-1)[:, -2:]  # (N, 2)
    margin = top2[:, 1] - top2[:, 0]  # (N,)
    flipped = a.argmax(-1) != b.argmax(-1)  # (N,)
    return {
        "max_abs_prob": round(float(np.max(np.abs(a - b))), 12),
        "top1_flips": int(flipped.sum()),
        "decisive_flips": int((flipped & (margin >= DECISIVE_MARGIN)).sum()),
    }



def measure(probe: Probe, prompts: list[list[int]], src_onnx: Path | None, out_onnx: Path,
             other: Path | None = None,
             reference: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Drift of INT8 (`out_onnx`, the graph this CPU runs) against float32 on the probes, and each
    graph's dependence on batching and on cache splits (a probe alone vs left-padded in one batch
    vs a prefix step + 3 cached tokens). `other`: the INT8 graph for the other CPU classes, when
    this CPU computes it exactly too; its probabilities are compared with `out_onnx`'s.

    float32 is `src_onnx` run here, or `reference`: its (alone, batched, cached) tables computed
    elsewhere (float_reference.py, a segment of layers at a time); then no speed ratio is measured."""
    tables, seconds = {}, {}
    if reference is not None:
        tables["float32"] = reference
    for dtype, path in (("float32", src_onnx), ("int8", out_onnx)):
        if dtype in tables:
            continue
        ort = OrtBackbone(path)  # one session at a time: the float32 one holds the whole model
        ort.prefill(prompts[0])  # warm-up: first-run allocations are not the model's speed
        t0 = time.perf_counter()
        alone = probe.alone(ort, prompts)
        seconds[dtype] = time.perf_counter() - t0
        tables[dtype] = (alone, probe.batched(ort, prompts), probe.cached(ort, prompts))
        del ort
    (p32, b32, c32), (p8, b8, c8) = tables["float32"], tables["int8"]  # each (probes, candidates)
    graphs_agree = None
    if other is not None:  # the other CPU classes' graph, run here: the same integers, so the same answers
        ort = OrtBackbone(other)
        graphs_agree = {"graph": other.name, "max_abs_prob": float(np.abs(probe.alone(ort, prompts) - p8).max())}
        del ort
    return {
        "drift": compare(p32, p8) | {"probes": len(prompts), "candidates": len(probe.cands)},
        "batch_dependence": {"int8": compare(p8, b8), "float32": compare(p32, b32)},
        "cache_dependence": {"int8": compare(p8, c8), "float32": compare(p32, c32)},
        "probabilities": {"float32": np.round(p32, 4).tolist(), "int8": np.round(p8, 4).tolist()},
        "p8": p8,
        "speed": {"probe_prefill_seconds": {k: round(v, 3) for k, v in seconds.items()},
                  "int8_vs_float32": round(seconds["float32"] / seconds["int8"], 2) if "float32" in seconds else None},
        "graphs_agree": graphs_agree,
    }


def load_check(prompts: list[list[int]], cands: list[int], p8: np.ndarray, k: int = LOAD_CHECK_PROBES) -> dict[str, Any]:
    """What the runtime re-runs at load on a CPU of another class than the one measured here: the
    first k probes' token ids, the candidate ids and INT8's probabilities (runtime engine.py)."""
    return {"input_ids": [list(map(int, p)) for p in prompts[:k]], "candidates": list(map(int, cands)),
            "probabilities": [[float(x) for x in row] for row in p8[:k]], "cpu": cpu_describe()}
