"""Learning curves of ``fit_curves.py`` result files as a PNG and a markdown table.

    python benchmarks/plot_fit_curves.py benchmarks/results/fit_curves/<file>.json \\
        --png docs/img/fit_curves.png --table

One panel per set: accuracy (and its 95 % interval) of the zero-shot readout (a flat line) and of
the fitted head against k rows per class; the last panel is the mean over sets.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def _priors(result: dict[str, Any]) -> list[str]:
    return [p for p in result["results"]["mean"] if p != "zero_shot"]


def table(result: dict[str, Any]) -> str:
    """Markdown: per set, zero-shot and fitted accuracy [95 % CI] per prior and k, then the means."""
    sets, mean = result["results"]["sets"], result["results"]["mean"]
    cols = [(p, k) for p in _priors(result) for k in mean[p]]
    fmt = lambda v: f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"  # noqa: E731
    lines = ["| set (type, options, test rows) | zero-shot | " + " | ".join(f"k={k}, prior {p}" for p, k in cols) + " |",
             "|---|---:|" + "---:|" * len(cols)]
    for name, e in sets.items():
        cells = [fmt(e["fitted"][p][k]["accuracy"]) if "accuracy" in e["fitted"][p].get(k, {}) else "–" for p, k in cols]
        lines.append(f"| {name} ({e['type']}, {e['options']}, {e['test_rows']}) | {fmt(e['zero_shot']['accuracy'])} | "
                     + " | ".join(cells) + " |")
    lines.append("| **mean over sets** | " + fmt(mean["zero_shot"]["accuracy"]) + " | "
                 + " | ".join(fmt(mean[p][k]["accuracy"]) for p, k in cols) + " |")
    lines.append("| mean accuracy − zero-shot (paired) | | "
                 + " | ".join(fmt(mean[p][k]["accuracy_minus_zero_shot"]) for p, k in cols) + " |")
    for m in ("ece", "nll"):
        lines.append(f"| mean {m.upper()} | {fmt(mean['zero_shot'][m])} | "
                     + " | ".join(fmt(mean[p][k][m]) for p, k in cols) + " |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean = result["results"]["mean"]
    priors = _priors(result)
    panels = [*result["results"]["sets"].items(),
              ("mean over sets", {"zero_shot": mean["zero_shot"], "fitted": {p: mean[p] for p in priors}})]
    cols = 4
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, (name, e) in zip(axes.flat, panels):
        for shift, prior in zip((0.97, 1.03), priors):
            xs = [int(k) for k, v in e["fitted"][prior].items() if "accuracy" in v]
            acc = [e["fitted"][prior][str(k)]["accuracy"] for k in xs]
            ax.errorbar([x * shift for x in xs], [a[0] for a in acc],
                        yerr=[[a[0] - a[1] for a in acc], [a[2] - a[0] for a in acc]],
                        marker="o", capsize=3, label=f"fitted, prior {prior}")
        z = e["zero_shot"]["accuracy"]
        ax.axhline(z[0], color="gray", linestyle="--", label="zero-shot auto")
        ax.axhspan(z[1], z[2], color="gray", alpha=0.15)
        ax.set_xscale("log", base=2)
        ks = sorted({int(k) for p in priors for k in e["fitted"][p]})
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
    args = p.parse_args()
    result = json.loads(args.result.read_text(encoding="utf-8"))
    if args.table:
        print(table(result))
    if args.png:
        plot(result, args.png)
        print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
