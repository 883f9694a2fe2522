"""Evaluation sweep: every dataset × label mode × calibration variant, with bootstrap uncertainty.

One command measures what the engine's defaults are chosen from (docs/evaluation.md):

    python benchmarks/eval_sweep.py --model DIR --fit 150 --test 200 --out benchmarks/results/eval-sweep.json

For each (dataset, label mode) cell it asks the dataset's question of the first ``--fit`` rows of
the calibration split and the first ``--test`` rows of the test split (fixed hash order,
datasets.py), plus the content-free state once. Raw probabilities are kept in ``<out>.raw.json``
and the sweep resumes from it, so an interrupted run loses at most one cell. Noul questions read
yes/no in every mode, so they are asked once (mode ``names``).

Then, per cell, ``evaluation.calibration_fit`` fits temperature / contextual / combined on the
calibration rows and scores all four variants on the test rows. Uncertainty: a percentile
bootstrap over test rows (``--boot`` resamples, seed 0) gives a 95% interval for accuracy,
macro-F1 and ECE; names − letters differences are paired (same rows, same resamples).

The recommendation printed at the end is mechanical: per question type, the label mode with the
higher mean test macro-F1 over that type's datasets; per cell, the calibration variant with the
lowest NLL on the calibration split among those that keep its accuracy (what
``typed-decisions calibrate --method auto`` writes).
The last line is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from typed_decisions.calibration import TypeCalibration
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import DATASETS, load_dataset
from typed_decisions.evaluation.fitting import apply_calibration, calibration_fit, fit_temperature
from typed_decisions.evaluation.metrics import accuracy, ece, macro_f1, metrics
from typed_decisions.evaluation.run import collect_probabilities, content_free_probabilities

METRICS = {"accuracy": accuracy, "macro_f1": lambda p, g: macro_f1([int(np.argmax(x)) for x in p], g), "ece": ece}


def bootstrap(probs: list[np.ndarray], gold: list[int], idx: np.ndarray) -> dict[str, list[float]]:
    """Each metric on every resample (rows ``idx[b]``)."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for rows in idx:
        p = [probs[i] for i in rows]
        g = [gold[i] for i in rows]
        for m, f in METRICS.items():
            out[m].append(float(f(p, g)))
    return out


def interval(samples: list[float] | np.ndarray) -> list[float]:
    """Percentile 95% interval."""
    return [round(float(np.percentile(samples, 2.5)), 4), round(float(np.percentile(samples, 97.5)), 4)]


def collect(decider: Decider, dataset: str, mode: str, n_fit: int, n_test: int) -> dict[str, Any]:
    spec = DATASETS[dataset].question
    fit = load_dataset(dataset, "calibration", n_fit)
    test = load_dataset(dataset, "test", n_test)
    t0 = time.perf_counter()
    fp, fg = collect_probabilities(decider, spec, fit.rows, label_mode=mode, desc=f"{dataset} {mode} fit")
    tp, tg = collect_probabilities(decider, spec, test.rows, label_mode=mode, desc=f"{dataset} {mode} test")
    cf = content_free_probabilities(decider, spec, "N/A", label_mode=mode)
    seconds = time.perf_counter() - t0
    return {"dataset": dataset, "type": spec.type, "label_mode": mode, "options": spec.option_names,
            "seconds": round(seconds, 1), "rows_per_second": round((len(fp) + len(tp)) / seconds, 3),
            "fit": {"gold": fg, "probabilities": [p.tolist() for p in fp]},
            "test": {"gold": tg, "probabilities": [p.tolist() for p in tp]},
            "content_free": cf.tolist()}


def reuse(raw: dict[str, Any], dataset: str, mode: str, n_fit: int, n_test: int) -> dict[str, Any] | None:
    """A cell measured with at least as many rows, cut to the first n_fit / n_test (rows come in a
    fixed order per split, so the first N rows of a larger run are exactly the rows of a smaller one)."""
    for key, cell in raw.items():
        ds, m, f, t = key.split("/")
        if ds == dataset and m == mode and int(f) >= n_fit and int(t) >= n_test:
            cut = {part: {k: v[:n] for k, v in cell[part].items()} for part, n in (("fit", n_fit), ("test", n_test))}
            return {**cell, **cut, "reused_from": key}
    return None


def analyse(cell: dict[str, Any], boot_idx: np.ndarray) -> dict[str, Any]:
    fp = [np.asarray(p) for p in cell["fit"]["probabilities"]]
    tp = [np.asarray(p) for p in cell["test"]["probabilities"]]
    fg, tg = cell["fit"]["gold"], cell["test"]["gold"]
    fit = calibration_fit(fp, fg, tp, tg, np.asarray(cell["content_free"]), qtype=cell["type"])
    cf = np.asarray(cell["content_free"])
    for name, v in fit["variants"].items():
        tc = TypeCalibration(temperature=v["temperature"], contextual=v["contextual"])
        samples = bootstrap(apply_calibration(tp, tc, cf), tg, boot_idx)
        v["test_ci95"] = {m: interval(s) for m, s in samples.items()}
        v["_samples"] = samples
    counts = np.bincount(tg, minlength=len(cell["options"]))
    fit["majority_accuracy"] = round(float(counts.max() / counts.sum()), 4)
    return fit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path, help="exported model directory")
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: all)")
    p.add_argument("--labels", default="names,letters", help="label modes, comma-separated")
    p.add_argument("--fit", type=int, default=150, help="calibration-split rows per cell")
    p.add_argument("--test", type=int, default=200, help="test-split rows per cell")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", required=True, type=Path, help="summary JSON; raw probabilities go to <out>.raw.json")
    args = p.parse_args(argv)

    raw_path = args.out.with_suffix(".raw.json")
    raw: dict[str, Any] = json.loads(raw_path.read_text()) if raw_path.exists() else {}
    decider: Decider | None = None
    cells = []
    for ds in args.datasets.split(","):
        modes = ["names"] if DATASETS[ds].question.type == "noul" else args.labels.split(",")
        for mode in modes:
            key = f"{ds}/{mode}/{args.fit}/{args.test}"
            cells.append(key)
            if key in raw:
                continue
            if (cell := reuse(raw, ds, mode, args.fit, args.test)) is not None:
                raw[key] = cell
                continue
            decider = decider or Decider.from_dir(args.model, threads=args.threads)
            raw[key] = {**collect(decider, ds, mode, args.fit, args.test), "model": decider.name}
            raw_path.write_text(json.dumps(raw) + "\n")
            print(f"{key}: {raw[key]['rows_per_second']} rows/s", file=sys.stderr)

    rng = np.random.default_rng(0)
    results: dict[str, Any] = {}
    for key in cells:
        cell = raw[key]
        n = len(cell["test"]["gold"])
        idx = rng.integers(0, n, size=(args.boot, n))
        results[key] = {"dataset": cell["dataset"], "type": cell["type"], "label_mode": cell["label_mode"],
                        "model": cell["model"], "fit_n": len(cell["fit"]["gold"]), "test_n": n,
                        "rows_per_second": cell["rows_per_second"], "_idx": idx, **analyse(cell, idx)}

    # transfer: one temperature per (type, label mode), fitted on the calibration rows of the OTHER
    # datasets of that type — would a fixed per-model default T help a task nobody calibrated for?
    for key, r in results.items():
        others = [k for k, o in results.items()
                  if o["type"] == r["type"] and o["label_mode"] == r["label_mode"] and o["dataset"] != r["dataset"]]
        if not others:
            continue
        fp = [np.asarray(x) for k in others for x in raw[k]["fit"]["probabilities"]]
        fg = [g for k in others for g in raw[k]["fit"]["gold"]]
        t = fit_temperature(fp, fg)
        tp = [np.asarray(x) for x in raw[key]["test"]["probabilities"]]
        calibrated, tg = apply_calibration(tp, TypeCalibration(temperature=t), None), raw[key]["test"]["gold"]
        m = metrics(calibrated, tg, qtype=r["type"])
        samples = bootstrap(calibrated, tg, r["_idx"])
        r["variants"]["transfer"] = {"temperature": t, "contextual": False, "fitted_on": [results[k]["dataset"] for k in others],
                                     "test": {k: m[k] for k in ("n", "accuracy", "macro_f1", "nll", "brier", "ece")},
                                     "test_ci95": {k: interval(s) for k, s in samples.items()}, "_samples": samples}

    # paired names − letters differences: both cells hold the same test rows, but each cell drew its own
    # resamples above, so the letters cell is re-bootstrapped on the names cell's resamples
    diffs = {}
    for key, r in results.items():
        if r["label_mode"] != "names":
            continue
        other = key.replace("/names/", "/letters/")
        if other not in results:
            continue
        lt = raw[other]
        lp = [np.asarray(x) for x in lt["test"]["probabilities"]]
        ls = bootstrap(lp, lt["test"]["gold"], r["_idx"])
        ns = r["variants"]["none"]["_samples"]
        diffs[r["dataset"]] = {m: {"delta": round(r["variants"]["none"]["test"][m] - results[other]["variants"]["none"]["test"][m], 4),
                                   "ci95": interval(np.asarray(ns[m]) - np.asarray(ls[m]))} for m in ("accuracy", "macro_f1")}

    by_type: dict[str, dict[str, list[float]]] = {}
    for r in results.values():
        by_type.setdefault(r["type"], {}).setdefault(r["label_mode"], []).append(r["variants"]["none"]["test"]["macro_f1"])
    defaults = {t: max(m, key=lambda k: float(np.mean(m[k]))) for t, m in by_type.items()}

    print(f"\n{'cell':<34} {'variant':<12} {'T':>6} {'acc':>6} {'95% CI':>15} {'F1':>6} {'NLL':>6} {'ECE':>6} {'95% CI':>15}")
    for key, r in results.items():
        for name, v in r["variants"].items():
            t, ci = v["test"], v["test_ci95"]
            mark = "*" if name == r["best"] else " "
            print(f"{key:<34} {name:<11}{mark} {v['temperature']:>6.2f} {t['accuracy']:>6.3f} "
                  f"{ci['accuracy'][0]:>7.3f}–{ci['accuracy'][1]:<7.3f} {t['macro_f1']:>6.3f} {t['nll']:>6.3f} "
                  f"{t['ece']:>6.3f} {ci['ece'][0]:>7.3f}–{ci['ece'][1]:<7.3f}")
    print("* = lowest calibration-split NLL among variants keeping its accuracy (what `calibrate --method auto` "
          "writes); "
          "transfer = one T fitted on the other datasets of the same type")
    for ds, d in diffs.items():
        print(f"{ds}: names − letters  acc {d['accuracy']['delta']:+.3f} {d['accuracy']['ci95']}  "
              f"macro-F1 {d['macro_f1']['delta']:+.3f} {d['macro_f1']['ci95']}")
    print("mean test macro-F1 by type and mode: " + "; ".join(
        f"{t}: " + ", ".join(f"{m} {np.mean(v):.3f} (n={len(v)})" for m, v in ms.items()) for t, ms in by_type.items()))

    for r in results.values():
        r.pop("_idx")
        for v in r["variants"].values():
            v.pop("_samples")
    summary = {"model": next(iter(results.values()))["model"] if results else None, "fit": args.fit,
               "test": args.test, "boot": args.boot, "command": "python benchmarks/eval_sweep.py " + " ".join(argv or sys.argv[1:]),
               "cells": results, "names_minus_letters": diffs, "default_label_mode": defaults}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    headline = {"default_label_mode": defaults,
                "best_test_ece": {k: round(r["variants"][r["best"]]["test"]["ece"], 4) for k, r in results.items()},
                "best_variant": {k: r["best"] for k, r in results.items()}}
    print(json.dumps(headline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
