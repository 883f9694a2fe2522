"""The adopter's self-check: the cut graph plus lm_head.npy must reproduce the unmodified graph.

Reference (oracle): the SOURCE graph, unmodified, on ONNX Runtime, one unpadded sequence at a
time from an empty past: its `logits`. Checked against the adopted directory driven the way the
runtime drives it (the exporter's self-check, selfcheck.py, with this reference in place of
transformers):

- `head`: each prompt from an empty past, every position, the WHOLE vocabulary:
  `last_hidden_state @ lm_head.T` (then logit scale and soft-cap) against the source's logits.
  This is what proves the head was located and its weight read right (tied or not).
- `prefill`, `left_padded_batch`, `cached_step_1`, `cached_step_3`, `right_padded_suffixes`: the
  candidate rows at each sequence's last real position, against the source run unpadded.

Both sides run the same ops on the same weights, so they agree to float32 reordering: 1e-5 of
the row's scale (`max|adopted - source| / max(1, max|source|)`) and 1e-5 on the softmax restricted
to the candidates. The source session is closed before the adopted one opens (one copy of the
weights in memory at a time).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..ort_backbone import OrtBackbone, candidate_logits, left_padded, restricted_softmax, right_padded_suffixes
from ..selfcheck import CANDIDATE_TEXTS, QUESTIONS, SUFFIX_TEXTS, SYSTEM

TOLERANCES = {"logits_rel": 1e-5, "prob_abs": 1e-5}
CHECKS = ("head", "prefill", "left_padded_batch", "cached_step_1", "cached_step_3", "right_padded_suffixes")


def plan_prompts(out_dir: Path, tokenizer_facts: dict[str, Any], chat_template: str | None,
                 vocab_size: int) -> dict[str, Any]:
    """Prompts, suffixes and candidate ids, tokenized by the runtime's own tokenizer and template
    (typed_decisions.tokenization) from the files just written to out_dir."""
    from typed_decisions.tokenization import ChatTemplate, Segment, TextTokenizer

    tok = TextTokenizer(out_dir / tokenizer_facts["file"], tokenizer_facts)
    template = ChatTemplate(chat_template, tok)
    prompts = []
    for question in QUESTIONS:
        segments = template.render_segments([("system", [Segment(SYSTEM, False)]), ("user", [Segment(question, False)])])
        prompts.append([i for ids in tok.encode_segments(segments) for i in ids])
    suffixes = [(tok.encode_plain(t) + prompts[1])[:n] for t, n in zip(SUFFIX_TEXTS, (1, 3, 5))]
    candidates: list[int] = []
    for text in CANDIDATE_TEXTS:
        ids = tok.encode_plain(text)
        if ids and ids[0] not in candidates:
            candidates.append(ids[0])
    for filler in range(vocab_size // 2, vocab_size):  # a tiny tokenizer may map several to one id
        if len(candidates) >= len(CANDIDATE_TEXTS):
            break
        if filler not in candidates:
            candidates.append(filler)
    pad = tokenizer_facts["pad_token_id"]
    return {"prompts": prompts, "suffixes": suffixes, "candidates": candidates, "pad_id": 0 if pad is None else pad}


def source_logits(onnx_path: Path, sequences: list[list[int]], num_kv_heads: int, head_dim: int,
                  kv_dtype: str) -> dict[tuple[int, ...], np.ndarray]:
    """The unmodified graph on each sequence alone, empty past: ids -> logits (S, V) float64."""
    from ..ort_backbone import cpu_session

    session = cpu_session(onnx_path)
    past = [i.name for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    refs = {}
    for ids in sequences:
        n = len(ids)
        feed = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64),
                "position_ids": np.arange(n, dtype=np.int64)[None]}
        feed.update({name: np.zeros((1, num_kv_heads, 0, head_dim), kv_dtype) for name in past})
        (logits,) = session.run(["logits"], feed)
        refs[tuple(ids)] = logits[0].astype(np.float64)  # (S, V)
    del session
    gc.collect()
    return refs


def _errors(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Scale-aware error of logits rows (..., K) against the reference, and of their restricted softmax."""
    rel = float(np.max(np.abs(got - ref))) / max(1.0, float(np.max(np.abs(ref))))
    prob = float(np.max(np.abs(restricted_softmax(got.reshape(-1, got.shape[-1])) -
                               restricted_softmax(ref.reshape(-1, ref.shape[-1])))))
    return {"logits_rel": rel, "prob_abs": prob}


def _full_vocab(hidden: np.ndarray, lm_head: np.ndarray, scale: float, cap: float | None,
                block: int = 16384) -> np.ndarray:
    """(S, H) -> (S, V) logits over the whole vocabulary, in float64, a block of head rows at a
    time (a float64 copy of a 150k x 1536 head would take 1.8 GB)."""
    parts = [candidate_logits(hidden, lm_head, list(range(i, min(i + block, lm_head.shape[0]))),
                              logit_scale=scale, softcap=cap) for i in range(0, lm_head.shape[0], block)]
    return np.concatenate(parts, axis=1)


def _worst(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in rows) for k in rows[0]} | {"rows": len(rows)}


def run_adopt_check(out_dir: Path, onnx_file: str, architecture: dict[str, Any], plan: dict[str, Any],
                    refs: dict[tuple[int, ...], np.ndarray], *, log=print) -> dict[str, Any]:
    """Every check of the module docstring; returns the manifest's `self_check` (the caller raises
    when it did not pass)."""
    t0 = time.perf_counter()
    ort_b = OrtBackbone(out_dir / onnx_file)
    lm_head = np.load(out_dir / "lm_head.npy", mmap_mode="r")  # (V, H)
    prompts, suffixes, cand = plan["prompts"], plan["suffixes"], plan["candidates"]
    scale, cap = architecture["logit_scale"], architecture["final_logit_softcapping"]

    def readout(hidden: np.ndarray) -> np.ndarray:  # (B, H) -> (B, K)
        return candidate_logits(hidden, lm_head, cand, logit_scale=scale, softcap=cap)

    def ref_last(ids: list[int]) -> np.ndarray:  # (K,)
        return refs[tuple(ids)][-1, cand]

    results: dict[str, Any] = {"candidates": cand, "prompt_lengths": [len(p) for p in prompts]}
    rows = []
    for ids in prompts:
        hidden, _ = ort_b.prefill(ids)  # (1, S, H)
        if hidden.shape[1] != len(ids):
            raise AssertionError(f"last_hidden_state has {hidden.shape[1]} positions for {len(ids)} tokens")
        rows.append(_errors(_full_vocab(hidden[0], lm_head, scale, cap), refs[tuple(ids)]))  # (S, V)
    results["head"] = _worst(rows)
    results["prefill"] = _worst([_errors(readout(ort_b.prefill(ids)[0][0, -1:])[0], ref_last(ids)) for ids in prompts])
    hidden, _ = ort_b.run(*left_padded(prompts, plan["pad_id"]))
    logits = readout(hidden[:, -1])
    results["left_padded_batch"] = _worst([_errors(logits[i], ref_last(p)) for i, p in enumerate(prompts)])
    for k in (1, 3):
        rows = []
        for ids in prompts:
            head, tail = ids[:-k], ids[-k:]
            _, present = ort_b.prefill(head)
            n = len(head)
            hidden, _ = ort_b.run(np.array([tail]), np.ones((1, n + k), np.int64), np.arange(n, n + k)[None], present)
            rows.append(_errors(readout(hidden[0, -1:])[0], ref_last(ids)))
        results[f"cached_step_{k}"] = _worst(rows)
    common = prompts[0]
    logits = readout(right_padded_suffixes(ort_b, common, suffixes, plan["pad_id"]))  # (B, K)
    results["right_padded_suffixes"] = _worst([_errors(logits[i], ref_last(common + s)) for i, s in enumerate(suffixes)])
    failures = [f"{name}: {key} {results[name][key]:.3g} > {TOLERANCES[key]:.3g}"
                for name in CHECKS for key in TOLERANCES if not results[name][key] <= TOLERANCES[key]]
    seconds = time.perf_counter() - t0
    log(f"self-check {'passed' if not failures else 'FAILED'} in {seconds:.1f} s")
    return {
        "passed": not failures,
        "failures": failures,
        "tolerances": dict(TOLERANCES),
        "reference": "the source graph, unmodified, on ONNX Runtime: one unpadded sequence, empty past",
        "graph": onnx_file,
        "seconds": round(seconds, 2),
        "results": results,
    }


def reference_sequences(plan: dict[str, Any]) -> list[list[int]]:
    return plan["prompts"] + [plan["prompts"][0] + s for s in plan["suffixes"]]


__all__ = ["CHECKS", "TOLERANCES", "plan_prompts", "reference_sequences", "run_adopt_check", "source_logits"]
