"""Dev-bench statistics: rows per split, label distribution, state length in a model's tokens.

    python -m benchmarks.studies.dataset_stats --model ~/.cache/typed-decisions/exports/qwen2.5-coder-1.5b-int8

Prints one markdown table (the one in docs/evaluation.md): per dataset the rows after dedupe, the
calibration / test split sizes, the gold label counts, and the mean / 95th-percentile / max length of
the state (and of the row's own question, where rows carry one) in the export's tokenizer, over all
rows after dedupe. The tokenizer is the export's ``tokenizer.json`` (the ``tokenizers`` package);
no model is loaded.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from typed_decisions.evaluation.datasets import DATASETS, load_dataset


def lengths(tok: Tokenizer, texts: list[str]) -> str:
    n = np.asarray([len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)])
    return f"{n.mean():.0f} / {np.percentile(n, 95):.0f} / {n.max()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path, help="export directory (its tokenizer.json is read)")
    p.add_argument("--datasets", default=",".join(DATASETS))
    args = p.parse_args(argv)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    print("| name | type, options | rows → calibration / test | gold labels (all rows) | state tokens mean / p95 / max"
          " | question tokens mean / p95 |")
    print("|---|---|---|---|---|---|")
    for name in args.datasets.split(","):
        spec = DATASETS[name].question
        rows = load_dataset(name, "all").rows
        cal, test = len(load_dataset(name, "calibration").rows), len(load_dataset(name, "test").rows)
        counts = Counter(r["gold"] for r in rows)
        shown = ", ".join(f"{k} {v:,}" for k, v in counts.most_common(6))
        if len(counts) > 6:
            shown += f", … ({len(counts)} classes; smallest {min(counts.values())})"
        q = lengths(tok, [r["question"] for r in rows]).rsplit(" / ", 1)[0] if spec.instructions_field else "–"
        print(f"| `{name}` | {spec.type}, {len(spec.options)} | {len(rows):,} → {cal:,} / {test:,} | {shown} | "
              f"{lengths(tok, [r['state'] for r in rows])} | {q} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
