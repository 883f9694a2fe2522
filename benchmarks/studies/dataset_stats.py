"""Dev-bench statistics: rows per split, label distribution, state length in a model's tokens.

    python -m benchmarks.studies.dataset_stats --model ~/.cache/typed-decisions/exports/qwen2.5-coder-1.5b-int8

Prints one markdown table (the one in docs/evaluation.md): per dataset the rows after dedupe, the
calibration / test split sizes, the gold label counts, and the mean / 95th-percentile / max length of
the state (and of the row's own question, where rows carry one) in the export's tokenizer, over all
rows after dedupe. The tokenizer is the export's ``tokenizer.json`` (the ``tokenizers`` package);
no model is loaded. The same numbers, and the table, go to
``benchmarks/results/dataset_stats/<model>-<cpuclass>-<date>.json`` (``harness.write_result``;
``--out`` to choose), whose path is said on stderr so that stdout stays the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from benchmarks import harness
from typed_decisions.evaluation.datasets import DATASETS, load_dataset

HEAD = ("| name | type, options | rows → calibration / test | gold labels (all rows) | state tokens mean / p95 / max"
        " | question tokens mean / p95 |\n|---|---|---|---|---|---|")


def lengths(tok: Tokenizer, texts: list[str]) -> dict[str, float]:
    """Mean, 95th percentile and max of the texts' lengths in tokens (no special tokens)."""
    n = np.asarray([len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)])
    return {"mean": float(n.mean()), "p95": float(np.percentile(n, 95)), "max": int(n.max())}


def dataset_stats(tok: Tokenizer, name: str) -> dict[str, Any]:
    """One dataset's numbers: its question's type and options, rows after dedupe and per split,
    the gold label counts (most common first), the state's (and the row's question's) lengths."""
    spec = DATASETS[name].question
    rows = load_dataset(name, "all").rows
    return {"type": spec.type, "options": len(spec.options), "rows": len(rows),
            "calibration": len(load_dataset(name, "calibration").rows), "test": len(load_dataset(name, "test").rows),
            "gold": dict(Counter(r["gold"] for r in rows).most_common()),
            "state_tokens": lengths(tok, [r["state"] for r in rows]),
            "question_tokens": lengths(tok, [r["question"] for r in rows]) if spec.instructions_field else None}


def table_row(name: str, s: dict[str, Any]) -> str:
    """``dataset_stats``' numbers as a row of the table (the six most common labels)."""
    counts = s["gold"]
    shown = ", ".join(f"{k} {v:,}" for k, v in list(counts.items())[:6])
    if len(counts) > 6:
        shown += f", … ({len(counts)} classes; smallest {min(counts.values())})"
    st, qt = s["state_tokens"], s["question_tokens"]
    q = f"{qt['mean']:.0f} / {qt['p95']:.0f}" if qt else "–"
    return (f"| `{name}` | {s['type']}, {s['options']} | {s['rows']:,} → {s['calibration']:,} / {s['test']:,} | "
            f"{shown} | {st['mean']:.0f} / {st['p95']:.0f} / {st['max']} | {q} |")


def model_name(export: Path) -> str:
    """The export's name as ``Artifacts.name`` reads it (the manifest's, else the folder's),
    without loading the export."""
    manifest = export / "manifest.json"
    name = json.loads(manifest.read_text(encoding="utf-8")).get("name") if manifest.is_file() else None
    return str(name or export.resolve().name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path, help="export directory (its tokenizer.json is read)")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--out", type=Path, default=None,
                   help="result file (default benchmarks/results/dataset_stats/<model>-<cpuclass>-<date>.json)")
    args = p.parse_args(argv)
    load_start = os.getloadavg()
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    print(HEAD)
    stats, lines = {}, [HEAD]
    for name in args.datasets.split(","):
        stats[name] = dataset_stats(tok, name)
        lines.append(table_row(name, stats[name]))
        print(lines[-1], flush=True)
    path = harness.write_result("dataset_stats", model_name(args.model),
                                {"tokenizer": str(args.model / "tokenizer.json"), "datasets": stats,
                                 "table_markdown": "\n".join(lines)},
                                command=harness.command("benchmarks.studies.dataset_stats", argv), out=args.out,
                                load_avg_start=load_start)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
