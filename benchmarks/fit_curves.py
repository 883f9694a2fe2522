"""Learning curves of the fitted readout (issue #31): head vs zero-shot `auto`, k rows per class.

For each dev-bench set (datasets.py) the script reads, once per row, what a head needs
(``Decider.features``: the hidden state at the answer position and the zero-shot probabilities):
the first ``max(k)`` rows of each class of the calibration split (fixed hash order) and the first
``--test`` rows of the test split. For each k it fits a head on the first k rows of each class
(``fit.fit_head``; a class with fewer rows gives all it has) and scores head and zero-shot on the
same test rows, with the prior of the rows it was fitted on (k per class: uniform) and with
the calibration split's class frequencies as the prior (``--heads``; what a user who knows how
often each answer occurs would give): accuracy, NLL, ECE, with 95 % percentile-bootstrap intervals (``--boot``
resamples of the test rows, seed 0, shared by both readouts so the delta is paired). Then the
mean over sets (each resample: the mean of the per-set resampled values).

The readouts compared (``--heads``): the multinomial head with either prior, the same with its
logits divided by a temperature fitted on the CV predictions (``+T``), and for score questions a
cumulative-logit head (``+ordinal``, ``fit_ordinal.py``); and in-context few-shot with the same
rows (``--shots``: k rows per class shown as examples, at most ``--max-shots``; a head fitted on the
same k gets ``accuracy_minus_few_shot``, paired on the same resamples). Each ECE comes with
its floor (``ece_floor``): what a perfectly calibrated readout with the same probabilities would
show on this many test rows (60 rows, 10 bins: typically 0.05-0.08), so an ECE is read against it.
The four multinomial readouts (either prior, with or without ``+T``) share one regression and its
CV: each k fits once and the others are derived exactly (``prior_variants``).

What each row read is cached by row (``<out>.features.npz``): re-scoring, more rows per class or
more test rows read only what was not read before.

It also times one request alone, zero-shot vs fitted, interleaved on the same test states with the
prefix cache off (``--time-rows``): the ratio line says what a head costs at serve time.

    python -m benchmarks.fit_curves --model DIR --ks 8,32,128 --test 60

writes benchmarks/results/fit_curves/<model>-<cpuclass>-<date>.json (``harness.write_result``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from typed_decisions.compiler import resolve_label_mode
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset
from typed_decisions.evaluation.fit_cli import first_per_class, head_rows
from typed_decisions.evaluation.metrics import accuracy, ece, nll
from typed_decisions.head_regression import HeadFit, fit_head, prior_shift
from typed_decisions.fitted import FittedHead

DEFAULT_SETS = ("trec", "sms-spam", "hutto-tweets", "hutto-movies", "rotten-tomatoes", "hutto-nyt", "hutto-amazon",
                "trec-fine", "debates-2016", "plot-review")  # fetchable on a new machine (docs/evaluation.md)


def prior_variants(fit: HeadFit, counts: np.ndarray, prior: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(weights, bias) of the readouts ``rows``, ``split``, ``rows+T``, ``split+T`` from one
    ``fit_head(prior="rows", calibrate="temperature")`` with balanced class weights: the four share
    the regression (W, b), its CV and the temperature T fitted on the CV predictions, and differ only
    in the division by T and the prior's bias shift (``typed_decisions/head_regression.py``):

        +T:    W/T, b/T + s_π           no T:  W, b + s_π          s_π = log π − log(1/C)

    with π the rows' class frequencies ``counts`` or ``prior`` (``fit.prior_shift``). The fit holds
    W/T and b/T + s_rows, so W = T·W_fit and b = T·(b_fit − s_rows); fitting each readout anew gives
    the same arrays to rounding (tests/benchmarks/test_fit_curves.py), at a quarter of the cost."""
    t, uniform = fit.temperature, np.ones(counts.size)
    s_rows, s_split = prior_shift(counts.astype(np.float64), uniform), prior_shift(prior, uniform)
    w_t, b_t = fit.weights, fit.bias - s_rows
    return {"rows+T": (w_t, b_t + s_rows), "split+T": (w_t, b_t + s_split),
            "rows": (w_t * t, b_t * t + s_rows), "split": (w_t * t, b_t * t + s_split)}


def scores(probs: np.ndarray, gold: np.ndarray, idx: np.ndarray) -> dict[str, np.ndarray]:
    """accuracy, NLL, ECE on each bootstrap resample (rows idx[b]) and on all rows (last entry)."""
    out: dict[str, list[float]] = {"accuracy": [], "nll": [], "ece": []}
    for rows in [*idx, np.arange(gold.size)]:
        p, g = list(probs[rows]), list(gold[rows])
        out["accuracy"].append(accuracy(p, g))
        out["nll"].append(nll(p, g))
        out["ece"].append(ece(p, g))
    return {k: np.array(v) for k, v in out.items()}


def interval(x: np.ndarray) -> list[float]:
    """[value on all rows, 2.5 %, 97.5 %] of resamples x[:-1]."""
    return [round(float(x[-1]), 4), round(float(np.percentile(x[:-1], 2.5)), 4),
            round(float(np.percentile(x[:-1], 97.5)), 4)]


class FeatureCache:
    """What ``Decider.features`` read per row (hidden state, zero-shot probabilities), kept in one
    ``.npz`` by key (set/split, and the few-shot examples' hash) and row hash: a later run with
    more rows per class or more test rows reads only the rows it has not seen. Saved every
    ``chunk`` rows, so an interrupted run keeps what it read."""

    def __init__(self, path: Path, chunk: int = 48) -> None:
        self.path, self.chunk = path, chunk
        self.data: dict[str, np.ndarray] = dict(np.load(path)) if path.exists() else {}

    def read(self, decider: Decider, key: str, question: Any, rows: list[dict[str, Any]], *,
             examples: list[dict[str, Any]] | None = None, layers: bool = False) -> tuple[np.ndarray, ...]:
        """(hidden (n, H), probs (n, C)) of ``rows``, and with ``layers`` their mid-layer states
        (n, L, H) too (kept under ``<key>/m``; a key read without them is read again with them)."""
        if layers and f"{key}/ids" in self.data and f"{key}/m" not in self.data:
            for suffix in ("ids", "h", "p"):
                self.data.pop(f"{key}/{suffix}")
        if examples:
            key += "/" + hashlib.sha256(json.dumps(examples, sort_keys=True).encode()).hexdigest()[:12]
        ids = [hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16] for r in rows]
        have = {i: n for n, i in enumerate(self.data.get(f"{key}/ids", np.array([], dtype=str)).tolist())}
        missing = [n for n, i in enumerate(ids) if i not in have]
        for start in range(0, len(missing), self.chunk):
            part = missing[start:start + self.chunk]
            h, p, _, *m = decider.features(question, [rows[n] for n in part], examples=examples, layers=layers)
            old_ids = self.data.get(f"{key}/ids", np.array([], dtype=str))
            self.data[f"{key}/ids"] = np.concatenate([old_ids.astype(str), np.array([ids[n] for n in part])])
            self.data[f"{key}/h"] = np.concatenate([self.data[f"{key}/h"], h]) if f"{key}/h" in self.data else h
            self.data[f"{key}/p"] = np.concatenate([self.data[f"{key}/p"], p]) if f"{key}/p" in self.data else p
            if layers:
                m32 = m[0].astype(np.float32)  # (n, L, H): float32 halves the file; the engine's states are float32
                self.data[f"{key}/m"] = np.concatenate([self.data[f"{key}/m"], m32]) if f"{key}/m" in self.data else m32
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.path, **self.data)
            print(f"  {key}: read {start + len(part)}/{len(missing)} rows", flush=True)
        have = {i: n for n, i in enumerate(self.data[f"{key}/ids"].tolist())} if ids else {}
        at = np.array([have[i] for i in ids], dtype=np.int64)
        if layers:
            return self.data[f"{key}/h"][at], self.data[f"{key}/p"][at], self.data[f"{key}/m"][at].astype(np.float64)
        return self.data[f"{key}/h"][at], self.data[f"{key}/p"][at]


def shot_order(gold: list[int], k: int, cap: int) -> list[int]:
    """The few-shot examples for k rows per class: the head's rows (``first_per_class``), at most
    ``cap`` of them taken round-robin over the classes (so a cap keeps the classes balanced),
    returned in the rows' (hash) order."""
    per_class: dict[int, list[int]] = {}
    for i in first_per_class(gold, k):
        per_class.setdefault(gold[i], []).append(i)
    picked: list[int] = []
    for rank in range(k):
        for c in sorted(per_class):
            if rank < len(per_class[c]) and len(picked) < cap:
                picked.append(per_class[c][rank])
    return sorted(picked)


def wire_example(spec: Any, row: dict[str, Any], n: int) -> dict[str, Any]:
    """A labelled row as a few-shot example of ``Decider.features``' question (named "q")."""
    ex = spec.example(row, n)
    return {k: ({"q": next(iter(v.values()))} if k in ("answers", "instructions") else v) for k, v in ex.items()}


def binned_ece(conf: np.ndarray, hit: np.ndarray, n_bins: int = 10) -> float:
    """``metrics.ece`` on top-1 confidences and hits (bin b: b/B < c <= (b+1)/B, c = 0 in bin 0)."""
    b = np.clip(np.ceil(conf * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    count = np.bincount(b, minlength=n_bins)
    gap = np.abs(np.bincount(b, hit, n_bins) - np.bincount(b, conf, n_bins))  # per bin: count · |acc − conf|
    return float(gap.sum() / max(count.sum(), 1))


def pooled_ece(tops: list[np.ndarray], idxs: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The ECE of all sets' test answers in one reliability diagram (tops: per set (2, n) top-1
    confidence and hit), on each paired bootstrap resample (per set its rows idx[b]) and on all
    rows (last), and its floor (``ece_floor`` of all the answers' confidences)."""
    vals = [binned_ece(np.concatenate([t[0][i[b]] for t, i in zip(tops, idxs)]),
                       np.concatenate([t[1][i[b]] for t, i in zip(tops, idxs)])) for b in range(idxs[0].shape[0])]
    conf = np.concatenate([t[0] for t in tops])
    vals.append(binned_ece(conf, np.concatenate([t[1] for t in tops])))
    return np.array(vals), ece_floor(conf)


def top1(probs: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """(2, n): each row's top-1 confidence and whether it is the gold class."""
    return np.stack([probs.max(axis=1), (probs.argmax(axis=1) == gold).astype(float)])


def ece_floor(conf: np.ndarray, draws: int = 200, seed: int = 1) -> float:
    """The ECE a perfectly calibrated readout with these top-1 confidences would still show on
    this many rows: the mean ECE when each answer is right with probability its confidence (the
    same as drawing the gold label from the probabilities, whose top-1 is hit with probability
    max p). An ECE measured on n rows is biased up by about this much (10 bins, 60 rows: often
    0.05-0.08)."""
    rng = np.random.default_rng(seed)
    return float(np.mean([binned_ece(conf, (rng.random(conf.size) < conf).astype(float)) for _ in range(draws)]))


def time_requests(decider: Decider, spec: Any, head: FittedHead, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per request alone, zero-shot and fitted, no prefix cache: ``harness.interleaved``
    with one round per row (both readouts answer row n in round n, the order swapped every other
    round, no warm-up), then the medians and the median of the rounds' fitted / zero-shot ratios."""
    reqs = [spec.row_request(decider.name, r, n) for n, r in enumerate(rows)]
    zero_rows, fit_rows = iter(reqs), iter(reqs)  # each readout's k-th call asks row k
    times, _ = harness.interleaved({
        "zero": lambda: decider.run_many([next(zero_rows)], use_cache=False, heads=None),
        "fit": lambda: decider.run_many([next(fit_rows)], use_cache=False, heads=[{spec.name: head}]),
    }, rounds=len(reqs), warmup=0)
    return {"zero_shot_s": float(np.median(times["zero"])), "fitted_s": float(np.median(times["fit"])),
            "ratio_fitted_over_zero_shot": float(np.median(harness.round_ratios(times["fit"], times["zero"])))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--datasets", default=",".join(DEFAULT_SETS))
    p.add_argument("--ks", default="8,32,128", help="rows per class to fit on")
    p.add_argument("--test", type=int, default=100, help="test-split rows per set")
    p.add_argument("--boot", type=int, default=1000)
    p.add_argument("--components", type=int, default=256)
    p.add_argument("--time-rows", type=int, default=20, help="requests timed per set (0: no timing)")
    p.add_argument("--heads", default="rows,split,rows+T,split+T,rows+ordinal",
                   help="the fitted readouts: a prior, rows (the fitted rows' frequencies) or split (the calibration "
                        "split's class frequencies), +T for the CV temperature, +ordinal for a cumulative-logit head "
                        "(score questions; fit_ordinal.py)")
    p.add_argument("--shots", default="8", help="in-context few-shot curve: k rows per class shown as examples "
                                                "(the head's rows; '' for none)")
    p.add_argument("--max-shots", type=int, default=40, help="at most this many few-shot examples (context and cost)")
    harness.common_args(p, threads=None)
    args = p.parse_args()
    load_start = os.getloadavg()
    heads = args.heads.split(",")
    known = {"rows", "split", "rows+T", "split+T", "rows+ordinal"}  # the ordinal head has no prior
    if not set(heads) <= known:
        p.error(f"--heads: unknown readout(s) {sorted(set(heads) - known)}; known: {sorted(known)}")
    ks = [int(k) for k in args.ks.split(",")]
    shot_ks = [int(k) for k in args.shots.split(",") if k]
    decider = Decider.load(args.model, threads=args.threads)
    out = args.out or harness.result_path("fit_curves", decider.model_key)
    cache = FeatureCache(out.with_suffix(".features.npz"))  # what each row read, so a re-fit never re-reads
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {}
    for name in harness.datasets_or_exit(args.datasets):
        t0 = time.perf_counter()
        cal = load_dataset(name, "calibration")
        spec = cal.question
        gold_all = [spec.gold_index(r, n) for n, r in enumerate(cal.rows)]
        train = [cal.rows[i] for i in first_per_class(gold_all, max(ks))]
        test = load_dataset(name, "test", args.test).rows
        q = spec.question()
        own = spec.instructions_field is not None
        h_tr, p_tr = cache.read(decider, f"{name}/train", q, head_rows(spec, train))
        h_te, p_te = cache.read(decider, f"{name}/test", q, head_rows(spec, test))
        split_prior = np.bincount(gold_all, minlength=len(spec.options)) + 1.0  # +1: no zero frequency
        y_tr = np.array([spec.gold_index(r, n) for n, r in enumerate(train)])
        y_te = np.array([spec.gold_index(r, n) for n, r in enumerate(test)])
        idx = rng.integers(0, y_te.size, size=(args.boot, y_te.size))
        zero = scores(p_te, y_te, idx)
        entry: dict[str, Any] = {"type": spec.type, "options": len(spec.options), "test_rows": int(y_te.size),
                                 "train_rows_read": int(y_tr.size),
                                 "zero_shot": {**{m: interval(v) for m, v in zero.items()},
                                               "ece_floor": round(ece_floor(p_te.max(axis=1)), 4)}, "fitted": {}}
        for k in shot_ks:  # in-context few-shot with the head's rows (k per class, at most --max-shots)
            shots = [train[i] for i in shot_order(list(y_tr), k, args.max_shots)]
            _, p_fs = cache.read(decider, f"{name}/test/shots{k}", q, head_rows(spec, test),
                                 examples=[wire_example(spec, r, n) for n, r in enumerate(shots)])
            s = scores(p_fs, y_te, idx)
            entry.setdefault("few_shot", {})[str(k)] = {
                "shots": len(shots), **{m: interval(v) for m, v in s.items()}, "ece_floor": round(ece_floor(p_fs.max(axis=1)), 4),
                "accuracy_minus_zero_shot": interval(s["accuracy"] - zero["accuracy"]),
                "_boot": {m: v.tolist() for m, v in s.items()}, "_top": top1(p_fs, y_te)}
        last, fits = None, {}
        for readout in heads:
            variant = readout.partition("+")[2]
            if variant == "ordinal" and spec.type != "score":
                continue
            entry["fitted"][readout] = {}
            for k in ks:
                sub = np.array(first_per_class(list(y_tr), k))
                counts = np.bincount(y_tr[sub], minlength=len(spec.options))
                if counts.min() < 2:
                    entry["fitted"][readout][str(k)] = {"skipped": f"a class has {int(counts.min())} rows"}
                    continue
                if variant == "ordinal":
                    from benchmarks.fit_ordinal import (
                        fit_ordinal,  # a study (scipy, scikit-learn), only when asked
                    )

                    predict, l2 = fit_ordinal(h_tr[sub], p_tr[sub], y_tr[sub], components=args.components)
                    probs, extra = predict(h_te, p_te), {"l2": l2}
                else:
                    if k not in fits:  # one regression, CV and temperature for the four readouts
                        fits[k] = fit_head(h_tr[sub], p_tr[sub], y_tr[sub], components=args.components, method="free",
                                           prior="rows", calibrate="temperature")
                    fit = fits[k]
                    weights, bias = prior_variants(fit, counts, split_prior)[readout]
                    head = FittedHead(question_type=spec.type, classes=decider.option_keys(decider.parse_question(q)),
                                      model=decider.model_key, export_sha256=decider.export_sha256,
                                      prompt_sha256=decider.prompt_sha256(q, own_instructions=own),
                                      own_instructions=own, rows_sha256="-",
                                      labels=resolve_label_mode(spec.type, decider.label_mode),
                                      mean=fit.mean, scale=fit.scale, weights=weights, bias=bias)
                    probs = head.probabilities(h_te, p_te)
                    extra = {"l2": fit.l2, "components": fit.components,
                             "temperature": round(fit.temperature if variant == "T" else 1.0, 4)}
                    last = head if last is None else last
                s = scores(probs, y_te, idx)
                entry["fitted"][readout][str(k)] = {
                    "rows": int(sub.size), "rows_per_class_min": int(counts.min()), **extra,
                    **{m: interval(v) for m, v in s.items()}, "ece_floor": round(ece_floor(probs.max(axis=1)), 4),
                    "accuracy_minus_zero_shot": interval(s["accuracy"] - zero["accuracy"]),
                    "_boot": {m: v.tolist() for m, v in s.items()}, "_top": top1(probs, y_te)}
                shown = entry.get("few_shot", {}).get(str(k))
                if shown is not None:  # the same k rows per class, shown in the prompt: paired on the same resamples
                    entry["fitted"][readout][str(k)]["accuracy_minus_few_shot"] = interval(
                        s["accuracy"] - np.asarray(shown["_boot"]["accuracy"]))
        entry["_boot_zero"] = {m: v.tolist() for m, v in zero.items()}
        entry["_top_zero"], entry["_idx"] = top1(p_te, y_te), idx
        if args.time_rows and last is not None:
            entry["timing"] = time_requests(decider, spec, last, test[: args.time_rows])
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        results[name] = entry
        line = {f"{pr}/{k}": v.get("accuracy", v)
                for pr, per_k in [*entry["fitted"].items(), ("few-shot", entry.get("few_shot", {}))]
                for k, v in per_k.items()}
        print(f"{name}: zero-shot acc {entry['zero_shot']['accuracy']}  fitted acc {line}  "
              f"timing {entry.get('timing')}  ({entry['seconds']} s)", flush=True)
    # the mean over sets, per readout, prior and k (each resample: the mean of the sets' resampled values)
    summary: dict[str, Any] = {"zero_shot": {}}
    for m in ("accuracy", "nll", "ece"):
        summary["zero_shot"][m] = interval(np.mean([np.array(e["_boot_zero"][m]) for e in results.values()], axis=0))
    cells = {r: {k: [(e["fitted"][r][k], e) for e in results.values()
                     if "_boot" in e["fitted"].get(r, {}).get(k, {})] for k in map(str, ks)} for r in heads}
    cells["few_shot"] = {str(k): [(e["few_shot"][str(k)], e) for e in results.values()] for k in shot_ks}
    for readout, per_k in cells.items():
        summary[readout] = {}
        for k, done in per_k.items():
            if not done:
                continue
            cell = {m: interval(np.mean([np.array(c["_boot"][m]) for c, _ in done], axis=0))
                    for m in ("accuracy", "nll", "ece")}
            cell["ece_floor"] = round(float(np.mean([c["ece_floor"] for c, _ in done])), 4)
            cell["accuracy_minus_zero_shot"] = interval(np.mean(
                [np.array(c["_boot"]["accuracy"]) - np.array(z["_boot_zero"]["accuracy"]) for c, z in done], axis=0))
            if readout != "few_shot" and all(k in z.get("few_shot", {}) for _, z in done):
                cell["accuracy_minus_few_shot"] = interval(np.mean(
                    [np.array(c["_boot"]["accuracy"]) - np.array(z["few_shot"][k]["_boot"]["accuracy"])
                     for c, z in done], axis=0))
            pooled, floor = pooled_ece([c["_top"] for c, _ in done], [z["_idx"] for _, z in done])
            cell["ece_pooled"], cell["ece_pooled_floor"] = interval(pooled), round(floor, 4)
            cell["sets"] = len(done)
            summary[readout][k] = cell
    pooled, floor = pooled_ece([e["_top_zero"] for e in results.values()], [e["_idx"] for e in results.values()])
    summary["zero_shot"]["ece_pooled"], summary["zero_shot"]["ece_pooled_floor"] = interval(pooled), round(floor, 4)
    summary["zero_shot"]["ece_floor"] = round(float(np.mean([e["zero_shot"]["ece_floor"] for e in results.values()])), 4)
    for e in results.values():  # resamples stay out of the file
        for key in ("_boot_zero", "_top_zero", "_idx"):
            e.pop(key, None)
        for per_k in [*e["fitted"].values(), e.get("few_shot", {})]:
            for f in per_k.values():
                f.pop("_boot", None)
                f.pop("_top", None)
    ratios = [e["timing"]["ratio_fitted_over_zero_shot"] for e in results.values() if "timing" in e]
    path = harness.write_result("fit_curves", decider.model_key, {"sets": results, "mean": summary},
                                command=harness.command("benchmarks.fit_curves"), out=out, load_avg_start=load_start)
    print(f"wrote {path}")
    print(json.dumps({"mean": summary, "ratio_fitted_over_zero_shot_median": float(np.median(ratios)) if ratios else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
