"""Does a calibration fitted on other bench sets help a set it has never seen? Leave-one-set-out.

Issue #14, lever 5: ship a per-question-type calibration for the default model only if it improves
NLL and ECE on every bench set it was not fitted on. This reads a sweep raw file
(``benchmarks/sweep.py``, cells ``dataset/setting``) and asks nothing of a model:

    python -m benchmarks.studies.calibration_transfer \\
        benchmarks/results/sweep/qwen2.5-coder-1.5b-int8-amx-2026-12-02.raw.json --setting auto \\
        --out benchmarks/results/calibration_transfer/qwen2.5-coder-1.5b-int8-analysis-2026-12-03.json

For each set S (the test rows of the cell ``S/<setting>``; fit rows, if any, are not used) and each
family, the calibration is fitted on rows that are not S's and applied to S's rows:

    type-T        one temperature per question type, fitted (min NLL, ``fitting.fit_temperature``) on
                  the rows of every OTHER set of S's type: what a per-type default in the export would be
    pooled-T      one temperature for every type, fitted on the rows of every other set, all types pooled
    type-Platt    noul only: logit shift + temperature, sigmoid(a·logit p_yes + b), fitted on the other
                  noul sets (noul always reads yes/no, so "yes" means the same thing in every set)
    within-T      the per-task ``calibrate`` path, for reference: S's own rows split by row index (even /
                  odd), T fitted on one half and applied to the other, both ways (2-fold cross-fitting)
    within-Platt  the same for the noul logit shift + temperature

A per-option bias is not a transferable thing for choice or score questions: sets have 2 to 50
options with unrelated meanings, so only a scalar per type (the temperature) can move between them.

Metrics (``evaluation.metrics``): NLL, ECE over 10 equal-width bins of the top probability, accuracy.
Differences after − before are paired: per set one matrix of ``--boot`` row resamples (seed 0, sets
drawn in file order) shared by "before" and every family; 95% percentile intervals. They resample the
held-out set's rows only: the calibration fitted on the other sets is held fixed. For ``within``,
"after" is the cross-fitted probability of every row, so its NLL and accuracy are the mean of the two
halves' (for an even row count); its ECE bins all cross-fitted rows together (less noisy than the mean
of two half-size ECEs).

The bar (the issue's): a family transfers if NLL and ECE both go down (point estimates) on every
held-out set it applies to. LOSO reports on all of a held-out set's rows, none of which was fitted on
(the issue's "held-out half" is the within-set reference's). The last line printed is one JSON object
with the verdict.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from typed_decisions.calibration import TypeCalibration
from typed_decisions.evaluation.calibration_fitting import apply_calibration, fit_temperature
from typed_decisions.evaluation.metrics import EPS, accuracy, ece, nll

N_BINS = 10
METRIC_NAMES = ("nll", "ece", "accuracy")


@dataclass(frozen=True)
class BenchSet:
    """The rows of one cell: probabilities (N, k) and gold indices (N,)."""

    name: str
    qtype: str
    options: list[str]
    probs: np.ndarray
    gold: np.ndarray


def load_sets(raw: Mapping[str, Any], setting: str) -> list[BenchSet]:
    """Every ``dataset/<setting>`` cell's test rows, in file order."""
    out = []
    for key, cell in raw.items():
        ds, _, s = key.rpartition("/")
        if s != setting:
            continue
        probs = np.asarray(cell["test"]["probabilities"], dtype=np.float64)
        gold = np.asarray(cell["test"]["gold"], dtype=np.intp)
        out.append(BenchSet(ds, cell["type"], list(cell["options"]), probs / probs.sum(axis=1, keepdims=True), gold))
    if not out:
        raise SystemExit(f"no cells for setting {setting!r}; the file has {sorted({k.rpartition('/')[2] for k in raw})}")
    return out


# ---------------------------------------------------------------- metrics on every resample at once


def row_terms(probs: np.ndarray, gold: np.ndarray, n_bins: int = N_BINS) -> dict[str, np.ndarray]:
    """Per row: the NLL term, the hit (0/1), hit − confidence, and the ECE bin (metrics.reliability_bins'
    rule: confidence c in (b/B, (b+1)/B], c = 0 in bin 0). Each metric is a mean or binned sum of these."""
    conf = probs.max(axis=1)  # (N,)
    hit = (probs.argmax(axis=1) == gold).astype(np.float64)  # (N,)
    return {"nll": -np.log(np.maximum(probs[np.arange(len(gold)), gold], EPS)), "hit": hit, "gap": hit - conf,
            "bin": np.clip(np.ceil(conf * n_bins).astype(np.intp) - 1, 0, n_bins - 1)}


def resampled_metrics(probs: np.ndarray, gold: np.ndarray, idx: np.ndarray, n_bins: int = N_BINS) -> dict[str, np.ndarray]:
    """NLL, ECE and accuracy of the rows ``idx[b]`` for every resample b; idx (B, N) -> each (B,).

    ECE = sum_b |B_b|/N · |acc_b − conf_b| = (1/N) sum_b |sum_{i in b} (hit_i − conf_i)|."""
    t = row_terms(probs, gold, n_bins)
    n_boot, n = idx.shape
    flat = (t["bin"][idx] + n_bins * np.arange(n_boot)[:, None]).ravel()  # (B·N,) one bin slot per resample
    gap_sums = np.bincount(flat, weights=t["gap"][idx].ravel(), minlength=n_boot * n_bins).reshape(n_boot, n_bins)
    return {"nll": t["nll"][idx].mean(axis=1), "ece": np.abs(gap_sums).sum(axis=1) / n,
            "accuracy": t["hit"][idx].mean(axis=1)}


def point_metrics(probs: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """The library's own NLL, ECE (10 bins) and accuracy."""
    rows, g = list(probs), gold.tolist()
    return {"nll": nll(rows, g), "ece": ece(rows, g, N_BINS), "accuracy": accuracy(rows, g)}


def interval(samples: np.ndarray) -> list[float]:
    """Percentile 95% interval."""
    return [round(float(np.percentile(samples, 2.5)), 4), round(float(np.percentile(samples, 97.5)), 4)]


# ---------------------------------------------------------------- the calibration families


def fit_t(probs: Sequence[np.ndarray], gold: Sequence[int]) -> dict[str, Any]:
    """One temperature (rows may have different option counts)."""
    return {"temperature": fit_temperature(probs, gold)}


def apply_t(params: Mapping[str, Any], probs: np.ndarray) -> np.ndarray:
    return np.stack(apply_calibration(list(probs), TypeCalibration(temperature=params["temperature"]), None))


def fit_platt(probs: Sequence[np.ndarray], gold: Sequence[int], ridge: float = 1e-3, iters: int = 100) -> dict[str, Any]:
    """Two-option rows: q_0 = sigmoid(a·z + b), z = log p_0 − log p_1, minimising the NLL (+ a tiny
    ridge ``ridge``·|w|²/2, so separable rows still have a finite optimum) by damped Newton steps: a
    logistic regression on one feature, convex. a is kept in [1/20, 20] (fit_temperature's T bounds),
    b refitted alone when a is clamped. Returned as the library's combined calibration,
    softmax((log p − log cf) / T), with T = 1/a and cf = softmax([−b/a, 0])."""
    p = np.maximum(np.stack([np.asarray(x, dtype=np.float64) for x in probs]), EPS)  # (N, 2)
    z = np.log(p[:, 0]) - np.log(p[:, 1])  # (N,)
    t = (np.asarray(gold) == 0).astype(np.float64)  # (N,) 1 where option 0 is gold
    x = np.stack([z, np.ones_like(z)], axis=1)  # (N, 2)

    def loss(w: np.ndarray) -> float:
        s = x @ w
        return float((np.logaddexp(0, s) - t * s).sum() + ridge * (w @ w) / 2)

    def newton(w: np.ndarray, free: np.ndarray) -> np.ndarray:
        for _ in range(iters):
            q = 1.0 / (1.0 + np.exp(-(x @ w)))
            g = (x.T @ (q - t) + ridge * w)[free]
            h = ((x * (q * (1 - q))[:, None]).T @ x + ridge * np.eye(2))[np.ix_(free, free)]
            step, f0 = np.linalg.solve(h, g), loss(w)
            while True:  # halve the step until the loss does not rise
                w_new = w.copy()
                w_new[free] -= step
                if loss(w_new) <= f0 + 1e-12 or np.abs(step).max() < 1e-12:
                    break
                step = step / 2
            w = w_new
            if np.abs(step).max() < 1e-10:
                break
        return w

    w = newton(np.array([1.0, 0.0]), np.array([True, True]))
    if not 1 / 20 <= w[0] <= 20:
        w = newton(np.array([float(np.clip(w[0], 1 / 20, 20)), w[1]]), np.array([False, True]))
    a, b = float(w[0]), float(w[1])
    cf = np.exp(np.array([-b / a, 0.0]) - max(-b / a, 0.0))
    return {"temperature": 1.0 / a, "bias": b, "content_free": (cf / cf.sum()).tolist()}


def apply_platt(params: Mapping[str, Any], probs: np.ndarray) -> np.ndarray:
    tc = TypeCalibration(temperature=params["temperature"], contextual=True)
    return np.stack(apply_calibration(list(probs), tc, np.asarray(params["content_free"])))


@dataclass(frozen=True)
class Family:
    """A calibration fitted on a pool of rows: ``scope`` says which (type / all / within)."""

    name: str
    scope: str
    fit: Callable[[Sequence[np.ndarray], Sequence[int]], dict[str, Any]]
    apply: Callable[[Mapping[str, Any], np.ndarray], np.ndarray]
    types: tuple[str, ...] = ("choice", "score", "noul")


FAMILIES = (
    Family("type-T", "type", fit_t, apply_t),
    Family("pooled-T", "all", fit_t, apply_t),
    Family("type-Platt", "type", fit_platt, apply_platt, types=("noul",)),
    Family("within-T", "within", fit_t, apply_t),
    Family("within-Platt", "within", fit_platt, apply_platt, types=("noul",)),
)


def fit_pool(sets: Sequence[BenchSet], target: BenchSet, scope: str) -> list[BenchSet]:
    """The sets a LOSO family fits on for ``target``: never the target itself."""
    return [s for s in sets if s.name != target.name and (scope == "all" or s.qtype == target.qtype)]


def calibrated(family: Family, sets: Sequence[BenchSet], target: BenchSet) -> tuple[np.ndarray, dict[str, Any]] | None:
    """target's probabilities after the family, and what was fitted on what; None if nothing to fit on."""
    if family.scope == "within":
        halves = [np.arange(0, len(target.gold), 2), np.arange(1, len(target.gold), 2)]  # even / odd rows
        after, params = np.empty_like(target.probs), []
        for fit_rows, eval_rows in (halves, halves[::-1]):
            prm = family.fit(list(target.probs[fit_rows]), target.gold[fit_rows].tolist())
            after[eval_rows] = family.apply(prm, target.probs[eval_rows])
            params.append(prm)
        return after, {"fitted_on": [f"{target.name}[even]", f"{target.name}[odd]"], "params": params}
    pool = fit_pool(sets, target, family.scope)
    if not pool:
        return None
    prm = family.fit([p for s in pool for p in s.probs], [int(g) for s in pool for g in s.gold])
    return family.apply(prm, target.probs), {"fitted_on": [s.name for s in pool], "params": prm}


# ---------------------------------------------------------------- the analysis


def analyse(sets: Sequence[BenchSet], families: Sequence[Family] = FAMILIES, n_boot: int = 1000,
            seed: int = 0) -> dict[str, Any]:
    """Per set: metrics before, and per family after, with paired bootstrap intervals of the deltas;
    per family: how many sets improve; the verdict."""
    rng = np.random.default_rng(seed)
    per_set: dict[str, Any] = {}
    for s in sets:
        idx = rng.integers(0, len(s.gold), size=(n_boot, len(s.gold)))  # shared by before and every family
        before = resampled_metrics(s.probs, s.gold, idx)
        entry: dict[str, Any] = {"type": s.qtype, "options": len(s.options), "n": len(s.gold),
                                 "before": point_metrics(s.probs, s.gold),
                                 "before_ci95": {m: interval(before[m]) for m in METRIC_NAMES}, "families": {}}
        for fam in families:
            if s.qtype not in fam.types or (res := calibrated(fam, sets, s)) is None:
                continue
            probs, fitted = res
            after = point_metrics(probs, s.gold)
            boot = resampled_metrics(probs, s.gold, idx)
            entry["families"][fam.name] = {
                **fitted, "after": after,
                "delta": {m: after[m] - entry["before"][m] for m in METRIC_NAMES},
                "delta_ci95": {m: interval(boot[m] - before[m]) for m in METRIC_NAMES}}
        per_set[s.name] = entry
    summary = {fam.name: family_summary(per_set, fam.name) for fam in families}
    summary = {k: v for k, v in summary.items() if v["sets"]}
    cross = [f.name for f in families if f.scope != "within" and f.name in summary]
    covering = [f for f in cross if summary[f]["sets"] == len(sets)]
    passing = [f for f in covering if summary[f]["meets_bar"]]
    by_type = {t: {f: summary[f]["by_type"][t]["meets_bar"] for f in cross if t in summary[f]["by_type"]}
               for t in sorted({s.qtype for s in sets})}
    verdict = ("transfers: " + ", ".join(passing) if passing else
               "does not transfer: no family fitted on other sets lowers both NLL and ECE on every held-out set")
    return {"sets": per_set, "families": summary, "verdict": verdict, "families_meeting_bar": passing,
            "meets_bar_by_type": by_type,
            "fit_on_all_sets": {t: fit_t([p for s in sets if s.qtype == t for p in s.probs],
                                         [int(g) for s in sets if s.qtype == t for g in s.gold])["temperature"]
                                for t in sorted({s.qtype for s in sets})}}


def family_summary(per_set: Mapping[str, Any], fam: str) -> dict[str, Any]:
    """Counts over the sets a family applies to; ``meets_bar``: NLL and ECE lower on every one."""

    def counts(names: list[str]) -> dict[str, Any]:
        d = [per_set[n]["families"][fam] for n in names]
        return {"sets": len(d),
                "nll_improved": sum(x["delta"]["nll"] < 0 for x in d),
                "ece_improved": sum(x["delta"]["ece"] < 0 for x in d),
                "both_improved": sum(x["delta"]["nll"] < 0 and x["delta"]["ece"] < 0 for x in d),
                "nll_worse_beyond_ci": [n for n, x in zip(names, d) if x["delta_ci95"]["nll"][0] > 0],
                "ece_worse_beyond_ci": [n for n, x in zip(names, d) if x["delta_ci95"]["ece"][0] > 0],
                "meets_bar": bool(d) and all(x["delta"]["nll"] < 0 and x["delta"]["ece"] < 0 for x in d)}

    names = [n for n, e in per_set.items() if fam in e["families"]]
    types = sorted({per_set[n]["type"] for n in names})
    return {**counts(names), "by_type": {t: counts([n for n in names if per_set[n]["type"] == t]) for t in types}}


# ---------------------------------------------------------------- report


def fmt_delta(v: float, ci: Sequence[float]) -> str:
    return f"{v:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def fmt_params(fitted: Mapping[str, Any]) -> str:
    ps = fitted["params"] if isinstance(fitted["params"], list) else [fitted["params"]]
    return " / ".join(f"T={p['temperature']:.2f}" + (f", b={p['bias']:+.2f}" if "bias" in p else "") for p in ps)


def report(res: Mapping[str, Any]) -> str:
    """Markdown: one row per (set, family), then the per-family counts and the verdict."""
    lines = ["| set (type, options, n) | NLL / ECE / acc before | family | fitted | ΔNLL [95% CI] | ΔECE [95% CI] "
             "| Δacc |", "|---|---|---|---|---:|---:|---:|"]
    for name, e in res["sets"].items():
        b = e["before"]
        head = f"{name} ({e['type']}, {e['options']}, {e['n']}) | {b['nll']:.3f} / {b['ece']:.3f} / {b['accuracy']:.3f}"
        for fam, f in e["families"].items():
            d, ci = f["delta"], f["delta_ci95"]
            lines.append(f"| {head} | {fam} | {fmt_params(f)} | {fmt_delta(d['nll'], ci['nll'])} | "
                         f"{fmt_delta(d['ece'], ci['ece'])} | {d['accuracy']:+.3f} |")
            head = " | "
    lines += ["", "| family | sets | NLL lower | ECE lower | both lower | NLL worse beyond CI | ECE worse beyond CI | "
              "lower on every set |", "|---|---:|---:|---:|---:|---|---|---|"]
    for fam, s in res["families"].items():
        ref = " (reference: fitted on the set itself)" if fam.startswith("within-") else ""
        lines.append(f"| {fam}{ref} | {s['sets']} | {s['nll_improved']} | {s['ece_improved']} | {s['both_improved']} | "
                     f"{', '.join(s['nll_worse_beyond_ci']) or '–'} | {', '.join(s['ece_worse_beyond_ci']) or '–'} | "
                     f"{'yes' if s['meets_bar'] else 'no'} |")
    per_type = "; ".join(f"{t}: " + ", ".join(f"{f} {'yes' if ok else 'no'}" for f, ok in d.items())
                         for t, d in res["meets_bar_by_type"].items())
    shipped = ", ".join(f"{t} {v:.2f}" for t, v in res["fit_on_all_sets"].items())
    lines += ["", f"Meets the bar per type (LOSO families): {per_type}",
              f"T fitted on every set of a type (what a per-type default would ship): {shipped}",
              "", f"**Verdict:** {res['verdict']}"]
    return "\n".join(lines)


def headline(res: Mapping[str, Any]) -> dict[str, Any]:
    return {"verdict": res["verdict"], "families_meeting_bar": res["families_meeting_bar"],
            "meets_bar_by_type": res["meets_bar_by_type"],
            "families": {f: {k: s[k] for k in ("sets", "nll_improved", "ece_improved", "both_improved")}
                         for f, s in res["families"].items()},
            "fit_on_all_sets": {t: round(v, 3) for t, v in res["fit_on_all_sets"].items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("raw", type=Path, help="a sweep raw file (benchmarks/sweep.py's <out>.raw.json)")
    p.add_argument("--setting", default="auto", help="the setting whose cells are read (default auto)")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the full result as JSON")
    args = p.parse_args(argv)

    raw = harness.read_results(args.raw)
    sets = load_sets(raw, args.setting)
    res = analyse(sets, n_boot=args.boot, seed=args.seed)
    table = report(res)
    print(table)
    if args.out is not None:
        models = sorted({c["model"] for c in raw.values() if isinstance(c, dict) and "model" in c})
        harness.write_result("calibration_transfer", ",".join(models) or None, {
            "raw": str(args.raw), "setting": args.setting, "boot": args.boot, "seed": args.seed, "ece_bins": N_BINS,
            **res, "table_markdown": table}, command=harness.command("benchmarks.studies.calibration_transfer", argv),
            out=args.out)
    print(json.dumps(headline(res)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
