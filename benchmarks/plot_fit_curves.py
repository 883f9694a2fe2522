"""Learning curves of ``fit_curves.py`` result files as a PNG and a markdown table.

    python -m benchmarks.plot_fit_curves benchmarks/results/fit_curves/<file>.json \\
        --png docs/img/fit_curves.png --table

One panel per set: accuracy (and its 95 % interval) of the zero-shot readout (a flat line), of the
fitted heads and of in-context few-shot (``few_shot``) against k rows per class; the last panel is
the mean over sets.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def _priors(result: dict[str, Any]) -> list[str]:
    """The readouts of the file besides zero-shot: fitted heads (a prior, +T, +ordinal) and few_shot."""
    return [p for p in result["results"]["mean"] if p != "zero_shot"]


def _cells(e: dict[str, Any], readout: str) -> dict[str, Any]:
    """A set's (or the mean's) results of one readout, by k."""
    if "fitted" not in e:  # the mean: {readout: {k: cell}}
        return e.get(readout, {})
    return e.get("few_shot", {}) if readout == "few_shot" else e["fitted"].get(readout, {})


def table(result: dict[str, Any]) -> str:
    """Markdown: per set, zero-shot and fitted accuracy [95 % CI] per prior and k, then the means."""
    sets, mean = result["results"]["sets"], result["results"]["mean"]
    cols = [(p, k) for p in _priors(result) for k in mean[p]]
    fmt = lambda v: f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"  # noqa: E731
    lines = ["| set (type, options, test rows) | zero-shot | " + " | ".join(f"{p}, k={k}" for p, k in cols) + " |",
             "|---|---:|" + "---:|" * len(cols)]
    for name, e in sets.items():
        cells = [fmt(_cells(e, p)[k]["accuracy"]) if "accuracy" in _cells(e, p).get(k, {}) else "–" for p, k in cols]
        lines.append(f"| {name} ({e['type']}, {e['options']}, {e['test_rows']}) | {fmt(e['zero_shot']['accuracy'])} | "
                     + " | ".join(cells) + " |")
    lines.append("| **mean over sets** | " + fmt(mean["zero_shot"]["accuracy"]) + " | "
                 + " | ".join(fmt(mean[p][k]["accuracy"]) for p, k in cols) + " |")
    lines.append("| mean accuracy − zero-shot (paired) | | "
                 + " | ".join(fmt(mean[p][k]["accuracy_minus_zero_shot"]) for p, k in cols) + " |")
    for m in ("ece", "ece_pooled", "nll"):
        if m not in mean["zero_shot"]:
            continue
        lines.append(f"| {'mean ' + m.upper() if m != 'ece_pooled' else 'ECE of all answers pooled'} | "
                     f"{fmt(mean['zero_shot'][m])} | " + " | ".join(fmt(mean[p][k][m]) for p, k in cols) + " |")
        floor = {"ece": "ece_floor", "ece_pooled": "ece_pooled_floor"}.get(m)
        if floor in mean["zero_shot"]:
            lines.append(f"| its floor (perfect calibration, same rows) | {mean['zero_shot'][floor]:.3f} | "
                         + " | ".join(f"{mean[p][k][floor]:.3f}" for p, k in cols) + " |")
    return "\n".join(lines)


def _first_with(results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Set ``name``'s entry in the first result file that has it."""
    found = [r["results"]["sets"][name] for r in results if name in r["results"]["sets"]]
    if not found:
        raise SystemExit(f"set {name!r} is in none of the result files")
    return found[0]


def combine(results: list[dict[str, Any]], names: list[str], ks: list[str], readout: str = "rows") -> dict[str, Any]:
    """The mean over ``names`` of sets measured in different runs (``results``; a set is read from the
    first file that has it), for zero-shot and the head at each k: accuracy, and the head's accuracy
    minus zero-shot. A run's bootstrap resamples are not in its file, so the interval is the normal
    approximation over independent sets: each set's standard error from its 95 % percentile interval,
    ``se_i = (hi_i − lo_i) / (2·1.96)``, and ``mean ± 1.96·sqrt(Σ se_i²) / n``. Every set must be in a file."""
    sets = {name: _first_with(results, name) for name in names}

    def mean_of(intervals: list[list[float]]) -> list[float]:
        m = sum(v[0] for v in intervals) / len(intervals)
        half = 1.96 * math.sqrt(sum(((v[2] - v[1]) / (2 * 1.96)) ** 2 for v in intervals)) / len(intervals)
        return [round(m, 4), round(m - half, 4), round(m + half, 4)]

    out: dict[str, Any] = {"sets": names, "zero_shot": mean_of([e["zero_shot"]["accuracy"] for e in sets.values()])}
    for k in ks:
        cells = [e["fitted"][readout][k] for e in sets.values()]
        out[k] = {"accuracy": mean_of([c["accuracy"] for c in cells]),
                  "accuracy_minus_zero_shot": mean_of([c["accuracy_minus_zero_shot"] for c in cells])}
    return out


def combined_result(results: list[dict[str, Any]], names: list[str], ks: list[str],
                    readout: str = "rows") -> dict[str, Any]:
    """A result document for ``plot`` from several runs: the sets ``names`` (each from the first
    file that has it), the head ``readout`` only, and as the mean the ``combine`` of them."""
    mean = combine(results, names, ks, readout)
    sets = {}
    for name in names:
        e = _first_with(results, name)
        sets[name] = {**e, "fitted": {readout: e["fitted"][readout]}, "few_shot": {}}
    return {"model": results[0]["model"], "machine": results[0]["machine"],
            "results": {"sets": sets, "mean": {"zero_shot": {"accuracy": mean["zero_shot"]},
                                               readout: {k: mean[k] for k in ks}}}}


def plot(result: dict[str, Any], path: Path, readouts: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean = result["results"]["mean"]
    priors = _priors(result)
    priors = [p for p in priors if p in readouts] if readouts else priors
    panels = [*result["results"]["sets"].items(), ("mean over sets", mean)]
    cols = 4
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, (name, e) in zip(axes.flat, panels):
        for shift, prior in zip((0.94, 0.98, 1.02, 1.06, 1.1), priors):
            xs = [int(k) for k, v in _cells(e, prior).items() if "accuracy" in v]
            acc = [_cells(e, prior)[str(k)]["accuracy"] for k in xs]
            ax.errorbar([x * shift for x in xs], [a[0] for a in acc],
                        yerr=[[a[0] - a[1] for a in acc], [a[2] - a[0] for a in acc]],
                        marker="o", capsize=3,
                        label="in-context few-shot" if prior == "few_shot" else f"fitted head, {prior}")
        z = e["zero_shot"]["accuracy"]
        ax.axhline(z[0], color="gray", linestyle="--", label="zero-shot auto")
        ax.axhspan(z[1], z[2], color="gray", alpha=0.15)
        ax.set_xscale("log", base=2)
        ks = sorted({int(k) for p in priors for k in _cells(e, p)})
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_ylim(0, 1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("labelled rows per class", fontsize=8)
        ax.set_ylabel("accuracy", fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{result['model']} ({result['machine'].get('class')}): fitted head vs zero-shot", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("result", type=Path)
    p.add_argument("--png", type=Path, default=None)
    p.add_argument("--table", action="store_true")
    p.add_argument("--readouts", default=None, help="readouts to draw, comma-separated (default: all in the file)")
    p.add_argument("--also", type=Path, action="append", default=[],
                   help="more result files: with --sets, the mean over sets measured in several runs (combine)")
    p.add_argument("--sets", default=None, help="the sets to average over, comma-separated (with --also); "
                                                "--table and --png then show these sets and their combined mean")
    p.add_argument("--ks", default="8,32", help="the k of the combined mean")
    args = p.parse_args()
    result = json.loads(args.result.read_text(encoding="utf-8"))
    if args.sets:
        files = [result, *(json.loads(f.read_text(encoding="utf-8")) for f in args.also)]
        print(json.dumps(combine(files, args.sets.split(","), args.ks.split(",")), indent=1))
        result = combined_result(files, args.sets.split(","), args.ks.split(","))  # what --table and --png show
    if args.table:
        print(table(result))
    if args.png:
        plot(result, args.png, args.readouts.split(",") if args.readouts else None)
        print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
