"""Evaluation sweep: a grid of named settings over every dev-bench dataset, with bootstrap uncertainty.

One command measures what the engine's defaults are chosen from (docs/evaluation.md):

    python -m benchmarks.sweep --model DIR --settings letters,names,auto --test 50 \\
        [--out benchmarks/results/sweep/<model>-<cpuclass>-<date>.json]

A **setting** is a named dict of options (``Setting``): ``options`` go to
``Decider.probabilities(request, **options)`` (today ``label_mode``; the levers of issue #14 add
theirs there), ``question`` is merged into every wire question (request-level fields), and
``decider`` goes to ``Decider.load`` (one Decider per distinct dict), and ``shots`` (k, default
0) shows k labelled rows of the dataset's calibration split before every state as few-shot
examples (``spec.shot_rows``: one row per class first, then the fixed hash order; the same k rows
for every test and fit row, so their KV is cached once per set). Built-ins are in
``BUILTIN_SETTINGS``; ``--settings-file FILE.json`` adds a list of ``{"name", "options",
"question", "decider", "shots"}`` objects, so a new lever is one more grid entry, not a new script.

For each dataset it asks the dataset's question of the first ``--fit`` rows of the calibration
split and the first ``--test`` rows of the test split (fixed hash order, datasets.py), row by row
and setting by setting, so the state's KV prefix is computed once per row and reused by every
setting (the Decider's prefix cache). Settings that compile to the same request (``auto`` is
``names`` on choice and ``letters`` on score; noul reads yes/no in every label mode) are asked
once and shared. Raw probabilities go to ``<out>.raw.json`` after every ``SAVE_EVERY`` rows, and
the sweep resumes from it (a cell measured with more rows serves a smaller run: rows come in a
fixed order, so the first N rows are always the same N).

Analysis, all on the test rows:
- per (dataset, setting): accuracy, macro-F1, NLL, ECE with 95% percentile-bootstrap intervals
  (``--boot`` resamples of the test rows, seed 0; one resample matrix per dataset, shared by all
  settings, so differences between settings are paired);
- per setting: the **mean over sets** (each resample: the mean of the per-set resampled values;
  sets resampled independently) and the **worst set** (lowest accuracy);
- per set, the **delta against the baseline setting** (``--baseline``, default ``letters``: the plain
  letters readout, no calibration) with its paired interval, and the mean delta over sets;
- with ``--fit`` > 0, the calibration variants (temperature / contextual / combined,
  ``evaluation.calibration_fit``) fitted on the calibration rows of each (dataset, setting).

The summary and the raw file are schema-1 result files (benchmarks/harness.py: the raw
probabilities are the raw file's ``results``); a raw file written before the schema is read too.
The last line printed is one JSON object with the headline numbers.

The sweep asks row-major (every setting of a row before the next row) so that one row's state KV
serves every setting; ``typed_decisions.evaluation.run.collect_readouts`` answers one setting over
all rows (``eval``'s order), which would prefill each state once per setting.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from typed_decisions.calibration import TypeCalibration
from typed_decisions.compiler import resolve_label_mode
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import DATASETS, load_dataset
from typed_decisions.evaluation.calibration_fitting import apply_calibration, calibration_fit
from typed_decisions.evaluation.metrics import (
    COVERAGES,
    accuracy,
    coverage_accuracy,
    ece,
    macro_f1,
    metrics,
)
from typed_decisions.spec import QuestionSpec, shot_rows

SAVE_EVERY = 10
METRICS: dict[str, Callable[[list[np.ndarray], list[int]], float]] = {
    "accuracy": accuracy, "macro_f1": lambda p, g: macro_f1([int(np.argmax(x)) for x in p], g), "ece": ece}


@dataclass(frozen=True)
class Setting:
    """One grid entry: a name and the options it asks with (see the module docstring)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)   # Decider.probabilities(**options)
    question: dict[str, Any] = field(default_factory=dict)  # merged into each wire question
    decider: dict[str, Any] = field(default_factory=dict)   # Decider.load(**decider)
    shots: int = 0                                          # few-shot examples from the calibration split

    def fingerprint(self) -> str:
        # shots only when set: raw files measured before few-shot existed keep their fingerprints
        return json.dumps({"options": self.options, "question": self.question, "decider": self.decider,
                           **({"shots": self.shots} if self.shots else {})}, sort_keys=True)


BUILTIN_SETTINGS = {s.name: s for s in [
    Setting("letters", {"label_mode": "letters"}),  # the plain letters readout: the baseline
    Setting("names", {"label_mode": "names"}),
    Setting("auto", {"label_mode": "auto"}),        # the engine's default (compiler.AUTO_LABELS)
    *(Setting(f"auto-{k}shot", {"label_mode": "auto"}, shots=k) for k in (2, 4, 8)),  # few-shot (issue #14)
]}
SETTING_FIELDS = {"name", "options", "question", "decider", "shots"}


def load_settings(names: str, settings_file: Path | None) -> list[Setting]:
    """The grid: built-in names (comma-separated) plus the entries of a JSON file, in that order."""
    known = dict(BUILTIN_SETTINGS)
    extra: list[Setting] = []
    if settings_file is not None:
        for n, obj in enumerate(json.loads(settings_file.read_text())):
            unknown = set(obj) - SETTING_FIELDS
            if "name" not in obj or unknown:
                raise SystemExit(f"{settings_file} entry {n}: needs 'name', may have options/question/decider/shots; "
                                 f"got {sorted(obj)}")
            shots = obj.get("shots", 0)
            if not isinstance(shots, int) or isinstance(shots, bool) or shots < 0:
                raise SystemExit(f"{settings_file} entry {n}: shots must be an integer >= 0, got {shots!r}")
            extra.append(Setting(obj["name"], obj.get("options", {}), obj.get("question", {}), obj.get("decider", {}),
                                 shots))
            known[obj["name"]] = extra[-1]
    chosen = []
    for name in [x for x in names.split(",") if x]:
        if name not in known:
            raise SystemExit(f"--settings: unknown setting {name!r}; known: {', '.join(known)}")
        chosen.append(known[name])
    chosen += [s for s in extra if s not in chosen]
    if len({s.name for s in chosen}) != len(chosen):
        raise SystemExit("settings: two entries have the same name")
    return chosen


def effective_key(setting: Setting, qtype: str) -> str:
    """Settings with equal keys compile the same request for this question type, so they share rows.

    >>> effective_key(BUILTIN_SETTINGS["auto"], "choice") == effective_key(BUILTIN_SETTINGS["names"], "choice")
    True
    >>> effective_key(BUILTIN_SETTINGS["letters"], "noul") == effective_key(BUILTIN_SETTINGS["names"], "noul")
    True
    >>> effective_key(BUILTIN_SETTINGS["auto"], "score") == effective_key(BUILTIN_SETTINGS["names"], "score")
    False

    Few-shot examples change the prompt, so k shots is a setting of its own (0 shots is none):

    >>> effective_key(BUILTIN_SETTINGS["auto-4shot"], "choice") == effective_key(BUILTIN_SETTINGS["auto"], "choice")
    False
    >>> effective_key(Setting("x", {"label_mode": "auto"}, shots=0), "choice") == effective_key(BUILTIN_SETTINGS["auto"], "choice")
    True
    """
    opts = dict(setting.options)
    mode = opts.pop("label_mode", "auto")
    # noul questions read yes/no whatever the label mode (question_block.question_block)
    opts["label_mode"] = "yes/no" if qtype == "noul" else resolve_label_mode(qtype, mode)
    return json.dumps({"options": opts, "question": setting.question, "decider": setting.decider,
                       **({"shots": setting.shots} if setting.shots else {})}, sort_keys=True)


def shot_examples(ds: str, spec: QuestionSpec, k: int) -> list[dict[str, Any]]:
    """k wire few-shot examples of a dataset: calibration-split rows, one per class first, then in
    the fixed hash order (``spec.shot_rows``)."""
    if k == 0:
        return []
    pool = load_dataset(ds, "calibration").rows
    rows = shot_rows(spec, pool, k)
    if len(rows) < k:
        raise SystemExit(f"{ds}: shots={k}, but the calibration split has only {len(rows)} rows")
    return [spec.example(r, n) for n, r in enumerate(rows)]


def ask(decider: Decider, spec: QuestionSpec, row: Mapping[str, Any], n: int, setting: Setting,
        examples: Sequence[Mapping[str, Any]] = ()) -> tuple[list[float], float | None]:
    """One row's option probabilities under ``setting`` (with ``examples`` as few-shot examples),
    and its label mass when the setting asks for it (option ``"label_mass": true``: one
    full-vocabulary product per question, so opt-in)."""
    req = spec.row_request(decider.name, row, n)
    if examples:
        req["examples"] = list(examples)
    if setting.question:
        req["questions"][spec.name] = {**req["questions"][spec.name], **setting.question}
    options = dict(setting.options)
    if options.pop("label_mass", False):
        read = decider.readouts(req, label_mass=True, **options)[spec.name]
        return read.probabilities().tolist(), read.mean_label_mass()
    return decider.probabilities(req, **options)[spec.name].tolist(), None


def save_raw(raw: Mapping[str, Any], raw_path: Path, command: str = "python -m benchmarks.sweep") -> None:
    """The raw probabilities as a schema-1 result (``results``: the cells; ``model``: theirs)."""
    models = sorted({c["model"] for c in raw.values() if "model" in c})
    harness.write_result("sweep", ",".join(models) or None, dict(raw), command=command, out=raw_path, raw=True)


def collect(raw: dict[str, Any], raw_path: Path, datasets: Sequence[str], settings: Sequence[Setting],
            n_fit: int, n_test: int, get_decider: Callable[[Setting], Decider], calibrate: bool,
            command: str = "python -m benchmarks.sweep") -> None:
    """Fill ``raw[dataset/setting]`` up to n_fit / n_test rows, row-major (see the module docstring),
    saving the raw file (``save_raw``) every ``SAVE_EVERY`` rows."""
    for ds in datasets:
        spec = DATASETS[ds].question
        splits = {"fit": load_dataset(ds, "calibration", n_fit).rows if n_fit else [],
                  "test": load_dataset(ds, "test", n_test).rows}
        shots = {k: shot_examples(ds, spec, k) for k in sorted({s.shots for s in settings})}
        for s in settings:
            cell = raw.setdefault(f"{ds}/{s.name}", {"dataset": ds, "type": spec.type, "setting": s.name,
                                                     "fingerprint": s.fingerprint(), "options": spec.option_names,
                                                     "fit": {"gold": [], "probabilities": []},
                                                     "test": {"gold": [], "probabilities": []}, "seconds": 0.0})
            if cell["fingerprint"] != s.fingerprint():
                raise SystemExit(f"{raw_path}: setting {s.name!r} was measured with other options "
                                 f"({cell['fingerprint']}); give the new one another name")
        for part, rows in splits.items():
            todo = [n for n in range(len(rows))
                    if any(len(raw[f"{ds}/{s.name}"][part]["gold"]) <= n for s in settings)]
            t0, done = time.perf_counter(), 0
            for n in todo:
                memo: dict[str, tuple[list[float], float | None]] = {}
                for s in settings:
                    cell = raw[f"{ds}/{s.name}"]
                    if len(cell[part]["gold"]) > n:
                        continue
                    key = effective_key(s, spec.type)
                    if key not in memo:
                        memo[key] = ask(get_decider(s), spec, rows[n], n, s, shots[s.shots])
                    probs, mass = memo[key]
                    cell[part]["probabilities"].append(probs)
                    if mass is not None:
                        cell[part].setdefault("label_mass", []).append(mass)
                    cell[part]["gold"].append(spec.gold_index(rows[n], n))
                    cell["model"] = get_decider(s).name
                done += 1
                if done % SAVE_EVERY == 0 or n == todo[-1]:
                    for s in settings:
                        raw[f"{ds}/{s.name}"]["seconds"] += time.perf_counter() - t0  # the whole grid's time
                    t0 = time.perf_counter()
                    save_raw(raw, raw_path, command)
                    print(f"{ds} {part}: {n + 1}/{len(rows)} rows", file=sys.stderr, flush=True)
        if calibrate:
            for s in settings:
                cell = raw[f"{ds}/{s.name}"]
                if "content_free" not in cell:
                    cf_req = spec.request(get_decider(s).name, "N/A")
                    if shots[s.shots]:
                        cf_req["examples"] = shots[s.shots]
                    opts = {k: v for k, v in s.options.items() if k != "label_mass"}
                    cf = get_decider(s).probabilities(cf_req, **opts)
                    cell["content_free"] = cf[spec.name].tolist()
                    save_raw(raw, raw_path, command)


def bootstrap(probs: list[np.ndarray], gold: list[int], idx: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric on every resample (rows ``idx[b]``)."""
    out = {m: np.empty(len(idx)) for m in METRICS}
    for b, rows in enumerate(idx):
        p = [probs[i] for i in rows]
        g = [gold[i] for i in rows]
        for m, f in METRICS.items():
            out[m][b] = f(p, g)
    return out


SIGNALS = ("confidence", "label_mass", "product")


def selective_accuracy(probs: Sequence[np.ndarray], gold: Sequence[int], masses: Sequence[float]) -> dict[str, float]:
    """Per abstain signal, the accuracy on the rows it ranks highest, averaged over the coverages
    ``COVERAGES`` (1.0 … 0.5): a scalar summary of the risk–coverage curve, higher is better.
    Signals: max p (``confidence``), the label mass, and their product.

    >>> r = selective_accuracy([np.array([.6, .4]), np.array([.9, .1])], [0, 1], [0.9, 0.2])
    >>> r["confidence"] < r["label_mass"]   # max p ranks the wrong answer first, the mass the right one
    True
    """
    conf = [float(np.max(p)) for p in probs]
    hits = [float(np.argmax(p) == y) for p, y in zip(probs, gold)]
    scores = {"confidence": conf, "label_mass": list(masses), "product": [c * m for c, m in zip(conf, masses)]}
    return {k: float(np.mean([r["accuracy"] for r in coverage_accuracy(v, hits, COVERAGES)]))
            for k, v in scores.items()}


def interval(samples: np.ndarray) -> list[float]:
    """Percentile 95% interval."""
    return [round(float(np.percentile(samples, 2.5)), 4), round(float(np.percentile(samples, 97.5)), 4)]


def analyse(raw: Mapping[str, Any], datasets: Sequence[str], settings: Sequence[Setting], n_fit: int, n_test: int,
            n_boot: int, baseline: str) -> dict[str, Any]:
    """Per-set metrics with intervals, mean over sets, worst set, and paired deltas against ``baseline``."""
    rng = np.random.default_rng(0)
    cells: dict[str, dict[str, Any]] = {}
    samples: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for ds in datasets:
        n = min(n_test, min(len(raw[f"{ds}/{s.name}"]["test"]["gold"]) for s in settings))
        idx = rng.integers(0, n, size=(n_boot, n))
        for s in settings:
            c = raw[f"{ds}/{s.name}"]
            tp = [np.asarray(p) for p in c["test"]["probabilities"][:n]]
            tg = c["test"]["gold"][:n]
            m = metrics(tp, tg, qtype=c["type"])
            boot = bootstrap(tp, tg, idx)
            samples[ds, s.name] = boot
            counts = np.bincount(tg, minlength=len(c["options"]))
            out = {"dataset": ds, "type": c["type"], "options": len(c["options"]), "setting": s.name,
                   "model": c.get("model"), "test_n": n, "majority_accuracy": round(float(counts.max() / n), 4),
                   "grid_seconds_per_row": round(c["seconds"] / max(1, len(c["fit"]["gold"]) + len(c["test"]["gold"])), 3),
                   "test": {k: m[k] for k in ("accuracy", "macro_f1", "nll", "brier", "ece") if k in m},
                   "test_ci95": {k: interval(v) for k, v in boot.items()}}
            masses = c["test"].get("label_mass", [])[:n]
            if len(masses) == n:
                point = selective_accuracy(tp, tg, masses)
                boots = [selective_accuracy([tp[i] for i in r], [tg[i] for i in r], [masses[i] for i in r])
                         for r in idx]
                diffs = {k: np.array([b[k] - b["confidence"] for b in boots]) for k in SIGNALS[1:]}
                samples[ds, s.name]["selective"] = np.array([[b[k] for k in SIGNALS] for b in boots])
                out["label_mass"] = {"mean": round(float(np.mean(masses)), 4), "min": round(float(np.min(masses)), 4),
                                     "selective_accuracy": {k: round(v, 4) for k, v in point.items()},
                                     "minus_confidence_ci95": {k: interval(v) for k, v in diffs.items()}}
            fit_n = min(n_fit, len(c["fit"]["gold"]))
            if fit_n and "content_free" in c:
                fp = [np.asarray(p) for p in c["fit"]["probabilities"][:fit_n]]
                cf = np.asarray(c["content_free"])
                fit = calibration_fit(fp, c["fit"]["gold"][:fit_n], tp, tg, cf, qtype=c["type"])
                for v in fit["variants"].values():
                    tc = TypeCalibration(temperature=v["temperature"], contextual=v["contextual"])
                    v["test_ci95"] = {k: interval(x) for k, x in bootstrap(apply_calibration(tp, tc, cf), tg, idx).items()}
                out["calibration"] = {"fit_n": fit_n, **fit}
            cells[f"{ds}/{s.name}"] = out

    summary: dict[str, Any] = {}
    for s in settings:
        acc = {ds: cells[f"{ds}/{s.name}"]["test"]["accuracy"] for ds in datasets}
        worst = min(acc, key=lambda d: acc[d])
        entry: dict[str, Any] = {
            "mean_accuracy": round(float(np.mean(list(acc.values()))), 4),
            "mean_accuracy_ci95": interval(np.mean([samples[d, s.name]["accuracy"] for d in datasets], axis=0)),
            "mean_macro_f1": round(float(np.mean([cells[f"{d}/{s.name}"]["test"]["macro_f1"] for d in datasets])), 4),
            "mean_ece": round(float(np.mean([cells[f"{d}/{s.name}"]["test"]["ece"] for d in datasets])), 4),
            "worst_set": worst, "worst_accuracy": acc[worst],
            "worst_accuracy_ci95": cells[f"{worst}/{s.name}"]["test_ci95"]["accuracy"]}
        with_mass = [d for d in datasets if "selective" in samples[d, s.name]]
        if with_mass:  # mean over the sets that recorded the label mass, paired per resample
            sel = np.mean([samples[d, s.name]["selective"] for d in with_mass], axis=0)  # (boot, signal)
            point = {k: float(np.mean([cells[f"{d}/{s.name}"]["label_mass"]["selective_accuracy"][k] for d in with_mass]))
                     for k in SIGNALS}
            entry["label_mass"] = {
                "sets": len(with_mass),
                "mean_selective_accuracy": {k: round(v, 4) for k, v in point.items()},
                "mean_minus_confidence": {k: round(point[k] - point["confidence"], 4) for k in SIGNALS[1:]},
                "mean_minus_confidence_ci95": {k: interval(sel[:, i] - sel[:, 0]) for i, k in enumerate(SIGNALS) if i}}
        if baseline in {x.name for x in settings} and s.name != baseline:
            deltas, dsamples = {}, []
            for d in datasets:
                diff = samples[d, s.name]["accuracy"] - samples[d, baseline]["accuracy"]
                dsamples.append(diff)
                deltas[d] = {"delta": round(acc[d] - cells[f"{d}/{baseline}"]["test"]["accuracy"], 4),
                             "ci95": interval(diff)}
            entry["delta_vs_baseline"] = deltas
            entry["mean_delta"] = round(float(np.mean([v["delta"] for v in deltas.values()])), 4)
            entry["mean_delta_ci95"] = interval(np.mean(dsamples, axis=0))
            entry["sets_worse_beyond_ci"] = [d for d, v in deltas.items() if v["ci95"][1] < 0]
        summary[s.name] = entry
    return {"cells": cells, "settings": summary}


def fmt(v: float, ci: Sequence[float], signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(v)} [{f.format(ci[0])}, {f.format(ci[1])}]"


def report(res: Mapping[str, Any], datasets: Sequence[str], settings: Sequence[Setting], baseline: str) -> str:
    """Markdown tables: accuracy per set and setting, the mean and worst rows, deltas against the baseline."""
    cells, summ = res["cells"], res["settings"]
    names = [s.name for s in settings]
    lines = ["| dataset (type, options, n) | majority | " + " | ".join(f"{n} acc [95% CI]" for n in names) + " |",
             "|---|---:|" + "---:|" * len(names)]
    for d in datasets:
        c0 = cells[f"{d}/{names[0]}"]
        lines.append(f"| {d} ({c0['type']}, {c0['options']}, {c0['test_n']}) | {c0['majority_accuracy']:.3f} | " + " | ".join(
            fmt(cells[f"{d}/{n}"]["test"]["accuracy"], cells[f"{d}/{n}"]["test_ci95"]["accuracy"]) for n in names) + " |")
    lines.append("| **mean over sets** | | " + " | ".join(
        fmt(summ[n]["mean_accuracy"], summ[n]["mean_accuracy_ci95"]) for n in names) + " |")
    lines.append("| **worst set** | | " + " | ".join(
        f"{summ[n]['worst_accuracy']:.3f} ({summ[n]['worst_set']})" for n in names) + " |")
    lines.append("| mean macro-F1 / mean ECE | | " + " | ".join(
        f"{summ[n]['mean_macro_f1']:.3f} / {summ[n]['mean_ece']:.3f}" for n in names) + " |")
    others = [n for n in names if "delta_vs_baseline" in summ[n]]
    if others:
        lines += ["", f"Accuracy minus `{baseline}` (paired bootstrap, same rows and resamples):", "",
                  "| dataset | " + " | ".join(f"{n} − {baseline}" for n in others) + " |",
                  "|---|" + "---:|" * len(others)]
        for d in datasets:
            lines.append(f"| {d} | " + " | ".join(
                fmt(summ[n]["delta_vs_baseline"][d]["delta"], summ[n]["delta_vs_baseline"][d]["ci95"], True)
                for n in others) + " |")
        lines.append("| **mean over sets** | " + " | ".join(
            fmt(summ[n]["mean_delta"], summ[n]["mean_delta_ci95"], True) for n in others) + " |")
    mass = [(k, c) for k, c in cells.items() if "label_mass" in c]
    if mass:
        lines += ["", "Abstain signals: accuracy on the answered rows, averaged over coverages 1.0–0.5 "
                  "(paired differences against max p):", "",
                  "| cell | mean label mass (min) | by max p | by label mass [− max p, 95% CI] | by product [− max p, 95% CI] |",
                  "|---|---:|---:|---:|---:|"]
        for k, c in mass:
            m, sa, ci = c["label_mass"], c["label_mass"]["selective_accuracy"], c["label_mass"]["minus_confidence_ci95"]
            lines.append(f"| {k} | {m['mean']:.3f} ({m['min']:.3f}) | {sa['confidence']:.3f} | "
                         f"{sa['label_mass']:.3f} {fmt(sa['label_mass'] - sa['confidence'], ci['label_mass'], True)} | "
                         f"{sa['product']:.3f} {fmt(sa['product'] - sa['confidence'], ci['product'], True)} |")
        for n in names:
            e = summ[n].get("label_mass")
            if e:
                lines.append(f"| **mean over {e['sets']} sets ({n})** | | {e['mean_selective_accuracy']['confidence']:.3f} | "
                             f"{e['mean_selective_accuracy']['label_mass']:.3f} "
                             f"{fmt(e['mean_minus_confidence']['label_mass'], e['mean_minus_confidence_ci95']['label_mass'], True)} | "
                             f"{e['mean_selective_accuracy']['product']:.3f} "
                             f"{fmt(e['mean_minus_confidence']['product'], e['mean_minus_confidence_ci95']['product'], True)} |")
    cal = [(k, c) for k, c in cells.items() if "calibration" in c]
    if cal:
        lines += ["", "| cell | variant | T | test acc | test NLL | test ECE [95% CI] |", "|---|---|---:|---:|---:|---:|"]
        for k, c in cal:
            for v_name, v in c["calibration"]["variants"].items():
                mark = " **(auto)**" if v_name == c["calibration"]["best"] else ""
                lines.append(f"| {k} | {v_name}{mark} | {v['temperature']:.2f} | {v['test']['accuracy']:.3f} | "
                             f"{v['test']['nll']:.3f} | {fmt(v['test']['ece'], v['test_ci95']['ece'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="exported model directory (not needed to re-analyse a complete raw file)")
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: all)")
    p.add_argument("--settings", default="letters,names,auto",
                   help=f"comma-separated setting names (built-in: {', '.join(BUILTIN_SETTINGS)})")
    p.add_argument("--settings-file", type=Path, help="JSON list of {name, options, question, decider, shots} grid entries")
    p.add_argument("--baseline", default="letters", help="the setting every other is compared with (default letters)")
    p.add_argument("--fit", type=int, default=0, help="calibration-split rows per set (0: no calibration variants)")
    p.add_argument("--test", type=int, default=50, help="test-split rows per set")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    harness.common_args(p, threads=None, out=False)
    p.add_argument("--out", type=Path, default=None,
                   help="summary JSON (default benchmarks/results/sweep/<model>-<cpuclass>-<date>.json); raw "
                        "probabilities go to <out>.raw.json")
    p.add_argument("--raw", type=Path, default=None,
                   help="raw probabilities file to read and extend (default <out>.raw.json): one raw file can "
                        "serve several summaries, e.g. a lever's own table next to the main one")
    p.add_argument("--analyse-only", action="store_true",
                   help="ask nothing: analyse the rows the raw file has (per set, up to --test rows that every setting has)")
    args = p.parse_args(argv)

    datasets = [d for d in args.datasets.split(",") if d]
    for d in datasets:
        if d not in DATASETS:
            raise SystemExit(f"--datasets: unknown dataset {d!r}; known: {', '.join(DATASETS)}")
    if not args.analyse_only:
        harness.datasets_or_exit(datasets)  # every set's file here before any row is asked
    settings = load_settings(args.settings, args.settings_file)
    command = harness.command("benchmarks.sweep", argv)
    out = args.out or harness.result_path("sweep", args.model.name if args.model else "unknown")
    raw_path = args.raw or out.with_suffix(".raw.json")
    raw: dict[str, Any] = harness.read_results(raw_path) if raw_path.exists() else {}
    deciders: dict[str, Decider] = {}

    def get_decider(s: Setting) -> Decider:
        key = json.dumps(s.decider, sort_keys=True)
        if key not in deciders:
            if args.model is None:
                raise SystemExit("--model is needed: the raw file lacks rows this run asks for")
            deciders[key] = Decider.load(args.model, threads=args.threads, **s.decider)
        return deciders[key]

    t0 = time.perf_counter()
    if args.analyse_only:
        missing = [f"{d}/{s.name}" for d in datasets for s in settings if f"{d}/{s.name}" not in raw]
        if missing:
            raise SystemExit(f"--analyse-only: {raw_path} has no rows for {', '.join(missing)}")
    else:
        collect(raw, raw_path, datasets, settings, args.fit, args.test, get_decider, calibrate=args.fit > 0,
                command=command)
    res = analyse(raw, datasets, settings, args.fit, args.test, args.boot, args.baseline)
    table = report(res, datasets, settings, args.baseline)
    print(table)
    summary = {"raw": str(raw_path), "fit": args.fit, "test": args.test, "boot": args.boot, "baseline": args.baseline,
               "grid": [asdict(s) for s in settings], "collect_seconds": round(time.perf_counter() - t0, 1),
               **res, "table_markdown": table}
    models = sorted({c["model"] for c in raw.values() if "model" in c})
    harness.write_result("sweep", ",".join(models) or None, summary, command=command, out=out)
    print(json.dumps({n: {k: v for k, v in e.items() if k != "delta_vs_baseline"} for n, e in res["settings"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
