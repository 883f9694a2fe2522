"""Learning curves of the fitted readout (issue #31): head vs zero-shot `auto`, k rows per class.

For each dev-bench set (datasets.py) the script reads, once per row, what a head needs
(``Decider.features``: the hidden state at the answer position and the zero-shot probabilities):
the first ``max(k)`` rows of each class of the calibration split (fixed hash order) and the first
``--test`` rows of the test split. For each k it fits a head on the first k rows of each class
(``fit.fit_head``; a class with fewer rows gives all it has) and scores head and zero-shot on the
same test rows, twice: with the prior of the rows it was fitted on (k per class: uniform) and with
the calibration split's class frequencies as the prior (``--priors``; what a user who knows how
often each answer occurs would give): accuracy, NLL, ECE, with 95 % percentile-bootstrap intervals (``--boot``
resamples of the test rows, seed 0, shared by both readouts so the delta is paired). Then the
mean over sets (each resample: the mean of the per-set resampled values).

It also times one request alone, zero-shot vs fitted, interleaved on the same test states with the
prefix cache off (``--time-rows``): the ratio line says what a head costs at serve time.

    python benchmarks/fit_curves.py --model DIR --ks 8,32,128 --test 100 \\
        --out benchmarks/results/fit_curves/<model>-<cpuclass>-<date>.json

The result file: {"schema": 1, "tool": "fit_curves", "command", "git", "machine", "results"}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from typed_decisions.compiler import resolve_label_mode
from typed_decisions.cpu import describe
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import DATASETS, load_dataset
from typed_decisions.evaluation.fit import first_per_class, head_rows
from typed_decisions.evaluation.metrics import accuracy, ece, nll
from typed_decisions.fit import fit_head
from typed_decisions.fitted import FittedHead

DEFAULT_SETS = ("trec", "sms-spam", "hutto-tweets", "hutto-movies", "rotten-tomatoes", "hutto-nyt", "hutto-amazon",
                "trec-fine", "causal-judgment", "vitaminc")


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


def time_requests(decider: Decider, spec: Any, head: FittedHead, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per request alone, zero-shot and fitted, interleaved (order swapped every row), no prefix cache."""
    t_zero, t_fit = [], []
    for n, r in enumerate(rows):
        req = spec.row_request(decider.name, r, n)
        runs = [("zero", None), ("fit", [{spec.name: head}])]
        for name, heads in (runs if n % 2 == 0 else runs[::-1]):
            t0 = time.perf_counter()
            decider.run_many([req], use_cache=False, heads=heads)
            (t_zero if name == "zero" else t_fit).append(time.perf_counter() - t0)
    return {"zero_shot_s": float(np.median(t_zero)), "fitted_s": float(np.median(t_fit)),
            "ratio_fitted_over_zero_shot": float(np.median(np.array(t_fit) / np.array(t_zero)))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--datasets", default=",".join(DEFAULT_SETS))
    p.add_argument("--ks", default="8,32,128", help="rows per class to fit on")
    p.add_argument("--test", type=int, default=100, help="test-split rows per set")
    p.add_argument("--boot", type=int, default=1000)
    p.add_argument("--components", type=int, default=256)
    p.add_argument("--time-rows", type=int, default=20, help="requests timed per set (0: no timing)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--priors", default="rows,split", help="rows (the fitted rows' frequencies) and/or split "
                                                          "(the calibration split's class frequencies)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    priors = args.priors.split(",")
    cache = args.out.with_suffix(".features.npz")  # what each row read, so a re-fit never re-reads
    saved = dict(np.load(cache)) if cache.exists() else {}
    ks = [int(k) for k in args.ks.split(",")]
    decider = Decider.load(args.model, threads=args.threads)
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {}
    for name in args.datasets.split(","):
        t0 = time.perf_counter()
        cal = load_dataset(name, "calibration")
        spec = cal.question
        gold_all = [spec.gold_index(r, n) for n, r in enumerate(cal.rows)]
        train = [cal.rows[i] for i in first_per_class(gold_all, max(ks))]
        test = load_dataset(name, "test", args.test).rows
        q = spec.question()
        own = spec.instructions_field is not None
        if f"{name}/h_tr" in saved and saved[f"{name}/h_tr"].shape[0] == len(train) \
                and saved[f"{name}/h_te"].shape[0] == len(test):
            h_tr, p_tr, h_te, p_te = (saved[f"{name}/{k}"] for k in ("h_tr", "p_tr", "h_te", "p_te"))
        else:
            h_tr, p_tr, _ = decider.features(q, head_rows(spec, train))
            h_te, p_te, _ = decider.features(q, head_rows(spec, test))
            saved.update({f"{name}/h_tr": h_tr, f"{name}/p_tr": p_tr, f"{name}/h_te": h_te, f"{name}/p_te": p_te})
            args.out.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(cache, **saved)
        split_prior = np.bincount(gold_all, minlength=len(spec.options)) + 1.0  # +1: no zero frequency
        y_tr = np.array([spec.gold_index(r, n) for n, r in enumerate(train)])
        y_te = np.array([spec.gold_index(r, n) for n, r in enumerate(test)])
        idx = rng.integers(0, y_te.size, size=(args.boot, y_te.size))
        zero = scores(p_te, y_te, idx)
        entry: dict[str, Any] = {"type": spec.type, "options": len(spec.options), "test_rows": int(y_te.size),
                                 "train_rows_read": int(y_tr.size),
                                 "zero_shot": {m: interval(v) for m, v in zero.items()}, "fitted": {}}
        last = None
        for prior in priors:
            entry["fitted"][prior] = {}
            for k in ks:
                sub = np.array(first_per_class(list(y_tr), k))
                counts = np.bincount(y_tr[sub], minlength=len(spec.options))
                if counts.min() < 2:
                    entry["fitted"][prior][str(k)] = {"skipped": f"a class has {int(counts.min())} rows"}
                    continue
                fit = fit_head(h_tr[sub], p_tr[sub], y_tr[sub], components=args.components,
                               prior="rows" if prior == "rows" else split_prior)
                head = FittedHead(question_type=spec.type, classes=decider.option_keys(decider.parse_question(q)),
                                  model=decider.model_key, export_sha256=decider.export_sha256,
                                  prompt_sha256=decider.prompt_sha256(q, own_instructions=own), own_instructions=own,
                                  rows_sha256="-", labels=resolve_label_mode(spec.type, decider.label_mode),
                                  mean=fit.mean, scale=fit.scale, weights=fit.weights, bias=fit.bias)
                s = scores(head.probabilities(h_te, p_te), y_te, idx)
                entry["fitted"][prior][str(k)] = {
                    "rows": int(sub.size), "rows_per_class_min": int(counts.min()), "l2": fit.l2,
                    "components": fit.components, **{m: interval(v) for m, v in s.items()},
                    "accuracy_minus_zero_shot": interval(s["accuracy"] - zero["accuracy"]),
                    "_boot": {m: v.tolist() for m, v in s.items()}}
                last = head
        entry["_boot_zero"] = {m: v.tolist() for m, v in zero.items()}
        if args.time_rows and last is not None:
            entry["timing"] = time_requests(decider, spec, last, test[: args.time_rows])
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        results[name] = entry
        line = {f"{pr}/{k}": (v["accuracy"] if "accuracy" in v else v)
                for pr, per_k in entry["fitted"].items() for k, v in per_k.items()}
        print(f"{name}: zero-shot acc {entry['zero_shot']['accuracy']}  fitted acc {line}  "
              f"timing {entry.get('timing')}  ({entry['seconds']} s)", flush=True)
    # the mean over sets, per readout, prior and k (each resample: the mean of the sets' resampled values)
    summary: dict[str, Any] = {"zero_shot": {}}
    for m in ("accuracy", "nll", "ece"):
        summary["zero_shot"][m] = interval(np.mean([np.array(e["_boot_zero"][m]) for e in results.values()], axis=0))
    for prior in priors:
        summary[prior] = {}
        for k in map(str, ks):
            done = [e for e in results.values() if "_boot" in e["fitted"][prior].get(k, {})]
            if not done:
                continue
            cell = {m: interval(np.mean([np.array(e["fitted"][prior][k]["_boot"][m]) for e in done], axis=0))
                    for m in ("accuracy", "nll", "ece")}
            cell["accuracy_minus_zero_shot"] = interval(np.mean(
                [np.array(e["fitted"][prior][k]["_boot"]["accuracy"]) - np.array(e["_boot_zero"]["accuracy"])
                 for e in done], axis=0))
            cell["sets"] = len(done)
            summary[prior][k] = cell
    for e in results.values():  # resamples stay out of the file
        e.pop("_boot_zero", None)
        for per_k in e["fitted"].values():
            for f in per_k.values():
                f.pop("_boot", None)
    ratios = [e["timing"]["ratio_fitted_over_zero_shot"] for e in results.values() if "timing" in e]
    git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"schema": 1, "tool": "fit_curves", "command": " ".join(["python", *sys.argv]), "git": git,
           "machine": describe(), "model": decider.model_key, "results": {"sets": results, "mean": summary}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"mean": summary, "ratio_fitted_over_zero_shot_median": float(np.median(ratios)) if ratios else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
