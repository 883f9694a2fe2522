"""The self-check: the exported directory must reproduce PyTorch before it gets a manifest.

Reference (oracle): transformers itself, one unpadded sequence at a time, no cache: the base model's
`last_hidden_state` at the last position, and the full model's logits (its own LM head, logit scale
and soft-cap) at the candidate tokens. Checked against ONNX Runtime on the exported files, driven
the way the runtime drives them:

- `prefill`: each prompt alone, from an empty past (past_seq = 0);
- `left_padded_batch`: the 3 prompts in one left-padded batch;
- `cached_step_1`, `cached_step_3`: prefill all but the last k tokens, then feed `present` back as
  the past for the last k tokens (positions continuing);
- `right_padded_suffixes`: one common past (a prompt), then 3 suffixes of lengths 1, 3, 5 in one
  right-padded batch on that past, each row read at its own last real position;
- `tokenizer`: tokenizer.json (Rust `tokenizers`) gives the same ids as the transformers tokenizer.

Errors are scale-aware: `max|ort - ref| / max(1, max|ref|)` over the row (hidden state, or the
candidate logits), plus the absolute difference of the softmax restricted to the candidates. Real
models carry activations in the tens (outlier channels), and float32 sums done in a different
order by ONNX Runtime and PyTorch differ in proportion to those magnitudes, so a fixed absolute
tolerance would either fail big models or say nothing on small ones. For |ref| <= 1 the bound is
absolute. 1e-4 is about 1000 float32 ulps at the row's scale: far above reorder noise, far below
any real bug (a wrong mask or position moves values by O(1)).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .ort_backbone import OrtBackbone, candidate_logits, left_padded, restricted_softmax, right_padded_suffixes
from .tokenizer_files import TOKENIZER_FILE, candidate_ids, encode_prompt, render_chat

TOLERANCES = {
    "hidden_rel": 1e-4,  # max|ort - torch| / max(1, max|torch|), last position's hidden state
    "logits_rel": 1e-4,  # the same on the candidate tokens' logits
    "prob_abs": 1e-4,  # max |p_ort - p_torch| of the softmax restricted to the candidates
    "tokenizer_mismatches": 0,  # texts on which tokenizer.json and transformers disagree
}

SYSTEM = "You are a careful assistant. Answer with the letter of one option."
QUESTIONS = [
    "Is a whale a fish? A) yes B) no",
    "Which is larger, 7 or 12? A) 7 B) 12 C) they are equal",
    "The build failed with 'undefined reference to main'. What is most likely wrong? "
    "A) a missing main function B) a network outage C) a full disk D) a typo in the README",
]
SUFFIX_TEXTS = ["B", "The answer is B", "I think the right option is C because"]
TOKENIZER_EXTRAS = ["  leading spaces", "tabs\tand\nnewlines", "digits 1234567 and 3.14", "naïve café — ünïcödé 日本語 🙂"]
CANDIDATE_TEXTS = ["A", "B", "C", " yes", " no"]
NUMERIC_CHECKS = ("prefill", "left_padded_batch", "cached_step_1", "cached_step_3", "right_padded_suffixes")


def _errors(ort_h: np.ndarray, ort_l: np.ndarray, ref_h: np.ndarray, ref_l: np.ndarray) -> dict[str, float]:
    """Scale-aware errors between ORT and the reference for one row (hidden (H,), logits (K,))."""
    hidden_abs = float(np.max(np.abs(ort_h - ref_h)))
    logits_abs = float(np.max(np.abs(ort_l - ref_l)))
    prob = restricted_softmax(ort_l[None]) - restricted_softmax(ref_l[None])
    return {
        "hidden_rel": hidden_abs / max(1.0, float(np.max(np.abs(ref_h)))),
        "logits_rel": logits_abs / max(1.0, float(np.max(np.abs(ref_l)))),
        "prob_abs": float(np.max(np.abs(prob))),
        "hidden_abs": hidden_abs,
        "logits_abs": logits_abs,
    }


def _worst(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in rows) for k in rows[0]} | {"rows": len(rows)}


def torch_references(model: Any, sequences: list[list[int]], candidates: list[int]) -> dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]:
    """transformers on each sequence alone, unpadded, no cache:
    ids -> (hidden at the last position (H,), candidate logits from the model's own head (K,)).

    Computed up front so that the caller can free the float32 model before ONNX Runtime loads its
    own copy of the weights (halves the self-check's peak memory on big models).
    """
    import torch

    from .onnx_export import base_model

    base, refs = base_model(model), {}
    # Only the last position's logits are needed; older heads without the option compute all.
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    for ids in sequences:
        x = torch.tensor([ids])
        with torch.no_grad():
            hidden = base(input_ids=x, use_cache=False).last_hidden_state[0, -1]  # (H,)
            logits = model(input_ids=x, use_cache=False, **keep).logits[0, -1]  # (V,)
        refs[tuple(ids)] = (hidden.double().numpy(), logits[candidates].double().numpy())
    return refs


@dataclass
class CheckPlan:
    """What the self-check runs, fixed before any model runs: token ids and the transformers-side
    results that need the Python tokenizer (filled by `plan_self_check`)."""

    texts: list[str]
    prompts: list[list[int]]
    suffixes: list[list[int]]
    candidates: list[int]
    pad_id: int
    tokenizer_result: dict[str, Any]

    def reference_sequences(self) -> list[list[int]]:
        return self.prompts + [self.prompts[0] + s for s in self.suffixes]


def plan_self_check(tokenizer: Any, out_dir: Path, tokenizer_facts: dict[str, Any], vocab_size: int) -> CheckPlan:
    """Render and tokenize the prompts, pick candidates and suffixes, and compare tokenizer.json
    (Rust) with the transformers tokenizer on the prompts and some awkward text."""
    from tokenizers import Tokenizer

    texts = [render_chat(tokenizer, q, SYSTEM) for q in QUESTIONS]
    prompts = [encode_prompt(tokenizer, t, tokenizer_facts["add_bos_token"]) for t in texts]
    filler = prompts[1]  # tops up suffixes when a tiny tokenizer makes them too short
    suffixes = [
        (list(tokenizer(t, add_special_tokens=False).input_ids) + filler)[:n]
        for t, n in zip(SUFFIX_TEXTS, (1, 3, 5))
    ]
    rust = Tokenizer.from_file(str(out_dir / TOKENIZER_FILE))
    probe_texts = texts + SUFFIX_TEXTS + TOKENIZER_EXTRAS
    mismatches = [
        t for t in probe_texts
        if rust.encode(t, add_special_tokens=False).ids != list(tokenizer(t, add_special_tokens=False).input_ids)
    ]
    return CheckPlan(
        texts=texts,
        prompts=prompts,
        suffixes=suffixes,
        candidates=candidate_ids(tokenizer, CANDIDATE_TEXTS, fallback_vocab=vocab_size),
        pad_id=tokenizer_facts["pad_token_id"] if tokenizer_facts["pad_token_id"] is not None else 0,
        tokenizer_result={"texts": len(probe_texts), "mismatches": len(mismatches), "examples": mismatches[:3]},
    )


@dataclass
class _Checks:
    """The ONNX Runtime side of the self-check: the exported graph, its LM head, the references."""

    ort: OrtBackbone
    lm_head: np.ndarray  # (V, H), memory-mapped
    architecture: dict[str, Any]
    plan: CheckPlan
    refs: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]

    def readout(self, hidden_rows: np.ndarray) -> np.ndarray:  # (B, H) -> (B, K)
        return candidate_logits(hidden_rows, self.lm_head, self.plan.candidates,
                                logit_scale=self.architecture["logit_scale"],
                                softcap=self.architecture["final_logit_softcapping"])

    def errors(self, hidden: np.ndarray, logits: np.ndarray, ids: list[int]) -> dict[str, float]:
        """One row (hidden (H,), candidate logits (K,)) against the reference of sequence ``ids``."""
        return _errors(hidden, logits, *self.refs[tuple(ids)])

    def alone(self, hidden: np.ndarray, ids: list[int]) -> dict[str, float]:
        """One row read out on its own."""
        return self.errors(hidden, self.readout(hidden[None])[0], ids)


def _check_prefill(c: _Checks) -> dict[str, float]:
    """Each prompt alone from an empty past."""
    rows = []
    for ids in c.plan.prompts:
        hidden, _ = c.ort.prefill(ids)
        rows.append(c.alone(hidden[0, -1].astype(np.float64), ids))  # (H,)
    return _worst(rows)


def _check_left_padded_batch(c: _Checks) -> dict[str, float]:
    """The prompts in one left-padded batch: every row ends at the last column."""
    prompts = c.plan.prompts
    hidden, _ = c.ort.run(*left_padded(prompts, c.plan.pad_id))
    last = hidden[:, -1].astype(np.float64)  # (B, H)
    logits = c.readout(last)
    return _worst([c.errors(last[i], logits[i], p) for i, p in enumerate(prompts)])


def _check_cached_step(c: _Checks, k: int) -> dict[str, float]:
    """Prefill all but the last k tokens, then the last k on the present (positions continuing)."""
    rows = []
    for ids in c.plan.prompts:
        head, tail = ids[:-k], ids[-k:]
        _, present = c.ort.prefill(head)
        n = len(head)
        hidden, _ = c.ort.run(np.array([tail]), np.ones((1, n + k), np.int64), np.arange(n, n + k)[None], present)
        rows.append(c.alone(hidden[0, -1].astype(np.float64), ids))
    return _worst(rows)


def _check_right_padded_suffixes(c: _Checks) -> dict[str, float]:
    """Suffixes of lengths 1, 3, 5 on one shared past (prompt 0), right-padded in one batch, each
    row read at its own last real position."""
    common, suffixes = c.plan.prompts[0], c.plan.suffixes
    last = right_padded_suffixes(c.ort, common, suffixes, c.plan.pad_id).astype(np.float64)  # (B, H)
    logits = c.readout(last)
    return _worst([c.errors(last[i], logits[i], common + s) for i, s in enumerate(suffixes)])


def _failures(results: dict[str, Any], tokenizer_result: dict[str, Any]) -> list[str]:
    """Every tolerance a check exceeded, as one line each (`not <=` also catches NaN)."""
    failures = [
        f"{name}: {key} {results[name][key]:.3g} > {TOLERANCES[key]:.3g}"
        for name in NUMERIC_CHECKS
        for key in ("hidden_rel", "logits_rel", "prob_abs")
        if not results[name][key] <= TOLERANCES[key]
    ]
    if tokenizer_result["mismatches"] > TOLERANCES["tokenizer_mismatches"]:
        failures.append(
            f"tokenizer: {tokenizer_result['mismatches']} texts tokenize differently, "
            f"e.g. {tokenizer_result['examples'][0]!r}"
        )
    return failures


def run_self_check(
    out_dir: Path,
    onnx_file: str,
    architecture: dict[str, Any],
    plan: CheckPlan,
    refs: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]],
    *,
    log=print,
) -> dict[str, Any]:
    """Run every ONNX Runtime check against the references; returns the manifest's `self_check`
    (the caller raises if not passed)."""
    t0 = time.perf_counter()
    c = _Checks(ort=OrtBackbone(out_dir / onnx_file), lm_head=np.load(out_dir / "lm_head.npy", mmap_mode="r"),
                architecture=architecture, plan=plan, refs=refs)
    prompts = plan.prompts
    results: dict[str, Any] = {"candidates": plan.candidates, "prompt_lengths": [len(p) for p in prompts]}
    log(f"self-check: {len(prompts)} prompts of {[len(p) for p in prompts]} tokens, candidates {plan.candidates}")
    results["prefill"] = _check_prefill(c)
    results["left_padded_batch"] = _check_left_padded_batch(c)
    for k in (1, 3):
        results[f"cached_step_{k}"] = _check_cached_step(c, k)
    results["right_padded_suffixes"] = _check_right_padded_suffixes(c)
    results["tokenizer"] = plan.tokenizer_result
    failures = _failures(results, plan.tokenizer_result)
    seconds = time.perf_counter() - t0
    log(f"self-check {'passed' if not failures else 'FAILED'} in {seconds:.1f} s")
    return {
        "passed": not failures,
        "failures": failures,
        "tolerances": dict(TOLERANCES),
        "reference": "transformers, one unpadded sequence, no cache",
        "graph": onnx_file,
        "seconds": round(seconds, 2),
        "results": results,
    }
