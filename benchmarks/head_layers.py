"""Learning curves of fitted heads per layer choice and fitting method (issue #49).

For each dev-bench set (``--datasets``) the script reads each row once (``Decider.features`` with
``layers=True``: the last hidden state, the mid-layer states the export carries, the zero-shot
probabilities; cached by row in ``<out>.features.npz``): the first 32 rows of each class of the
calibration split (fixed hash order, nested: k = 2 rows are among k = 8's) and the first
``--test`` rows of the test split, as they come (so a skewed set stays skewed). Then, with no
further reads, for each k in ``--ks`` and each readout it fits a head on the first k rows per
class and scores it on the test rows beside zero-shot, paired on the same bootstrap resamples:

    layers   which states the head reads: ``last`` (the final hidden state), ``14``, ``14+last``, …
    method   ``anchored``: ``head_regression.fit_head`` (the zero-shot reading as the starting
             point, L2 toward it, chosen by CV with "no change" among the candidates);
             ``free``: the previous fit (scikit-learn's L2 regression toward 0, balanced weights)
    prior    the task's class frequencies the head answers under: ``split`` (the calibration
             split's, what a user who knows how often each answer occurs gives) — rows are
             sampled k per class, not as they occur, so their own frequencies are not the task's

Per readout one result file (``--out`` stem + readout name), each with per-set accuracy / NLL /
ECE and their difference to zero-shot with 95 % paired intervals, the mean over sets and the
pooled ECE (``fit_curves.pooled_ece``).

    python -m benchmarks.head_layers --model DIR --ks 2,8,32 --test 80
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.fit_curves import FeatureCache, ece_floor, interval, pooled_ece, scores, top1
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset
from typed_decisions.evaluation.fit_cli import first_per_class, head_rows
from typed_decisions.fitted import head_features
from typed_decisions.head_regression import fit_head, prior_shift
from typed_decisions.heads import stack_states

DEV_SETS = ("trec", "sms-spam", "hutto-tweets", "hutto-movies", "rotten-tomatoes", "hutto-nyt", "hutto-amazon",
            "debates-2016", "plot-review", "causal-judgment", "vitaminc")
MAX_K = 32


def read_set(decider: Decider, cache: FeatureCache, name: str, test_rows: int) -> dict[str, Any]:
    """One set's cached reads: train (first 32 per class) and test features, gold classes, split prior."""
    cal = load_dataset(name, "calibration")
    spec = cal.question
    gold_all = [spec.gold_index(r, n) for n, r in enumerate(cal.rows)]
    train = [cal.rows[i] for i in first_per_class(gold_all, MAX_K)]
    test = load_dataset(name, "test", test_rows).rows
    q = spec.question()
    h_tr, p_tr, m_tr = cache.read(decider, f"{name}/train", q, head_rows(spec, train), layers=True)
    h_te, p_te, m_te = cache.read(decider, f"{name}/test", q, head_rows(spec, test), layers=True)
    return {"spec": spec, "h_tr": h_tr, "p_tr": p_tr, "m_tr": m_tr, "h_te": h_te, "p_te": p_te, "m_te": m_te,
            "y_tr": np.array([spec.gold_index(r, n) for n, r in enumerate(train)]),
            "y_te": np.array([spec.gold_index(r, n) for n, r in enumerate(test)]),
            "split_prior": np.bincount(gold_all, minlength=len(spec.options)) + 1.0}


READOUTS = ("free/last/rows", "free/last/split", "anchored/last/split", "anchored/last/rows", "anchored/14/split",
            "anchored/18/split", "anchored/14+last/split", "anchored/18+last/split", "anchored/14+18+last/split")


def parse_readout(name: str) -> tuple[str, list[int | str], str, bool]:
    """"method/layers/prior[+T]" → (method, layers, prior, temperature).

    >>> parse_readout("anchored/18+last/split+T")
    ('anchored', [18, 'last'], 'split', True)
    """
    method, layers, prior = name.split("/")
    prior, _, t = prior.partition("+")
    return method, [k if k == "last" else int(k) for k in layers.split("+")], prior, t == "T"


def fit_readout(d: dict[str, Any], name: str, sub: np.ndarray, layer_ids: tuple[int, ...], components: int
                ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Fit one readout on train rows ``sub``; (test probabilities uncalibrated, with T, fit facts)."""
    method, which, prior, _ = parse_readout(name)
    h_tr = stack_states(d["h_tr"][sub], d["m_tr"][sub], layer_ids, which)
    h_te = stack_states(d["h_te"], d["m_te"], layer_ids, which)
    y = d["y_tr"][sub]
    counts = np.bincount(y, minlength=d["p_tr"].shape[1]).astype(np.float64)
    pi = d["split_prior"] if prior == "split" else counts
    if method == "anchored":
        fit = fit_head(h_tr, d["p_tr"][sub], y, components=components, prior=list(pi), calibrate="temperature")
    else:  # today's: balanced class weights, the prior as a bias shift
        fit = fit_head(h_tr, d["p_tr"][sub], y, components=components, method="free", prior=list(pi),
                       calibrate="temperature")
    t = fit.temperature
    w_t, b_t = fit.weights, fit.bias
    if method == "anchored":
        w, b = w_t * t, b_t * t
    else:  # free: the prior shift is added after the division by T (head_regression.fit_head)
        shift = prior_shift(pi, np.ones(pi.size))
        w, b = w_t * t, (b_t - shift) * t + shift
    def probs(weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
        z = head_features(h_te, np.log(np.maximum(d["p_te"], 1e-300)), fit.mean, fit.scale) @ weights.T + bias
        z = z - z.max(axis=1, keepdims=True)
        return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    facts = {"l2": None if np.isinf(fit.l2) else fit.l2, "components": fit.components, "temperature": round(t, 4),
             "cv_gain": None if fit.cv_gain is None else [round(x, 4) for x in fit.cv_gain],
             "worse_than_zero_shot_by_cv": fit.worse_than_zero_shot, "fit_seconds": round(fit.seconds, 2)}
    return probs(w, b), probs(w_t, b_t), facts


def evaluate(sets: dict[str, dict[str, Any]], readouts: list[str], ks: list[int], layer_ids: tuple[int, ...],
             components: int, boot: int) -> dict[str, dict[str, Any]]:
    """Per readout (and its +T): per set and k the scores and the paired deltas to zero-shot, then the means."""
    rng = np.random.default_rng(0)
    per: dict[str, dict[str, Any]] = {r: {"sets": {}} for name in readouts for r in (name, name + "+T")}
    zero_of: dict[str, Any] = {}
    for set_name, d in sets.items():
        y_te = d["y_te"]
        idx = rng.integers(0, y_te.size, size=(boot, y_te.size))
        zero = scores(d["p_te"], y_te, idx)
        zero_of[set_name] = (zero, top1(d["p_te"], y_te), idx)
        for name in readouts:
            for r in (name, name + "+T"):
                per[r]["sets"][set_name] = {"type": d["spec"].type, "options": len(d["spec"].options),
                                            "test_rows": int(y_te.size),
                                            "zero_shot": {m: interval(v) for m, v in zero.items()}, "k": {}}
            for k in ks:
                sub = np.array(first_per_class(list(d["y_tr"]), k))
                counts = np.bincount(d["y_tr"][sub], minlength=len(d["spec"].options))
                if counts.min() < 2:
                    continue
                plain, with_t, facts = fit_readout(d, name, sub, layer_ids, components)
                for r, probs in ((name, plain), (name + "+T", with_t)):
                    s = scores(probs, y_te, idx)
                    per[r]["sets"][set_name]["k"][str(k)] = {
                        "rows": int(sub.size), **facts, **{m: interval(v) for m, v in s.items()},
                        "accuracy_minus_zero_shot": interval(s["accuracy"] - zero["accuracy"]),
                        "_boot": s, "_top": top1(probs, y_te)}
            print(f"  {set_name} {name}: " + "  ".join(
                f"k={k} {per[name]['sets'][set_name]['k'][k]['accuracy_minus_zero_shot']}"
                for k in per[name]["sets"][set_name]["k"]), flush=True)
    for r, doc in per.items():
        mean: dict[str, Any] = {"zero_shot": {m: interval(np.mean([zero_of[s][0][m] for s in doc["sets"]], axis=0))
                                              for m in ("accuracy", "nll", "ece")}}
        pooled, floor = pooled_ece([zero_of[s][1] for s in doc["sets"]], [zero_of[s][2] for s in doc["sets"]])
        mean["zero_shot"]["ece_pooled"], mean["zero_shot"]["ece_pooled_floor"] = interval(pooled), round(floor, 4)
        for k in map(str, ks):
            done = [s for s, e in doc["sets"].items() if k in e["k"]]
            if not done:
                continue
            cells = [doc["sets"][s]["k"][k] for s in done]
            cell = {m: interval(np.mean([c["_boot"][m] for c in cells], axis=0)) for m in ("accuracy", "nll", "ece")}
            cell["accuracy_minus_zero_shot"] = interval(np.mean(
                [c["_boot"]["accuracy"] - zero_of[s][0]["accuracy"] for c, s in zip(cells, done)], axis=0))
            cell["worse_than_zero_shot"] = [s for s, c in zip(done, cells) if c["accuracy_minus_zero_shot"][2] < 0]
            pooled, floor = pooled_ece([c["_top"] for c in cells], [zero_of[s][2] for s in done])
            cell["ece_pooled"], cell["ece_pooled_floor"], cell["sets"] = interval(pooled), round(floor, 4), len(done)
            mean[k] = cell
        doc["mean"] = mean
        for e in doc["sets"].values():
            for c in e["k"].values():
                c.pop("_boot"), c.pop("_top")
    return per


def serving_ratio(decider: Decider, d: dict[str, Any], name: str, set_name: str, rows: int,
                  components: int) -> dict[str, Any]:
    """What a head reading ``name``'s layers costs at serve time: a FittedHead fitted on the set's
    cached k = 32 rows (no new reads), then one request alone per test row, zero-shot and fitted,
    interleaved, prefix cache off (``fit_curves.time_requests``): the medians and the median ratio."""
    from benchmarks.fit_curves import time_requests
    from typed_decisions.compiler import resolve_label_mode
    from typed_decisions.fitted import FittedHead

    method, which, prior, _ = parse_readout(name)
    spec = d["spec"]
    q = spec.question()
    own = spec.instructions_field is not None
    states = stack_states(d["h_tr"], d["m_tr"], decider.engine.hidden_layers, which)
    pi = d["split_prior"] if prior == "split" else np.bincount(d["y_tr"]).astype(np.float64)
    fit = fit_head(states, d["p_tr"], d["y_tr"], components=components, method=method, prior=list(pi))
    head = FittedHead(question_type=spec.type, classes=decider.option_keys(decider.parse_question(q)),
                      model=decider.model_key, export_sha256=decider.export_sha256,
                      prompt_sha256=decider.prompt_sha256(q, own_instructions=own), own_instructions=own,
                      rows_sha256="-", labels=resolve_label_mode(spec.type, decider.label_mode), layers=which,
                      mean=fit.mean, scale=fit.scale, weights=fit.weights, bias=fit.bias)
    test = load_dataset(set_name, "test", rows).rows
    return {"readout": name, "set": set_name, "rows": len(test), **time_requests(decider, spec, head, test)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--datasets", default=",".join(DEV_SETS))
    p.add_argument("--test", type=int, default=80, help="test-split rows per set")
    p.add_argument("--read-only", action="store_true", help="read and cache the features, fit nothing")
    p.add_argument("--ks", default="2,8,32", help="rows per class to fit on")
    p.add_argument("--readouts", default=",".join(READOUTS), help="method/layers/prior, each also with +T")
    p.add_argument("--components", type=int, default=256)
    p.add_argument("--boot", type=int, default=1000)
    p.add_argument("--time-rows", type=int, default=0, help="time this many requests alone, zero-shot vs a head "
                                                            "(--time-readout, on the first set); 0: no timing")
    p.add_argument("--time-readout", default="anchored/18+last/split", help="a readout reading a mid layer: what "
                                                                           "keeping mid-layer states costs")
    p.add_argument("--time-only", action="store_true", help="the timing alone, no learning curves")
    harness.common_args(p, threads=None)
    args = p.parse_args()
    load_start = os.getloadavg()
    decider = Decider.load(args.model, threads=args.threads)
    out = args.out or harness.result_path("head_layers", decider.model_key)
    cache = FeatureCache(out.with_suffix(".features.npz"))
    sets = {}
    for name in harness.datasets_or_exit(args.datasets):
        t0 = time.perf_counter()
        sets[name] = read_set(decider, cache, name, args.test)
        print(f"{name}: {sets[name]['y_tr'].size} train + {sets[name]['y_te'].size} test rows "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.read_only:
        return 0
    command = harness.command("benchmarks.head_layers")
    if args.time_rows:
        first = next(iter(sets))
        timing = serving_ratio(decider, sets[first], args.time_readout, first, args.time_rows, args.components)
        print(json.dumps(timing), flush=True)
        path = out.with_name(f"{out.stem}-serving.json")
        harness.write_result("head_layers", decider.model_key, timing, command=command, out=path,
                             load_avg_start=load_start)
        if args.time_only:
            return 0
    per = evaluate(sets, args.readouts.split(","), [int(k) for k in args.ks.split(",")],
                   decider.engine.hidden_layers, args.components, args.boot)
    summary = {}
    for r, doc in per.items():
        path = out.with_name(f"{out.stem}-{r.replace('/', '-').replace('+', '_')}.json")
        harness.write_result("head_layers", decider.model_key, {"readout": r, **doc}, command=command, out=path,
                             load_avg_start=load_start)
        summary[r] = {k: {m: v[m] for m in ("accuracy", "accuracy_minus_zero_shot", "ece_pooled",
                                             "worse_than_zero_shot")} for k, v in doc["mean"].items() if k != "zero_shot"}
        print(f"{r}: " + json.dumps(summary[r]), flush=True)
    harness.write_result("head_layers", decider.model_key, {"summary": summary, "zero_shot": next(iter(per.values()))[
        "mean"]["zero_shot"], "sets": list(sets)}, command=command, out=out, load_avg_start=load_start)
    print(f"wrote {out} and one file per readout beside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
