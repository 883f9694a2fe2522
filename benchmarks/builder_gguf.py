"""The graph builder on a catalogue GGUF (default: the default model), measured with `/usr/bin/time -v`:
wall seconds and peak RSS of `python -m typed_decisions_export.cli MODEL --out DIR --quiet` (the
builder is `--builder auto`'s choice for a GGUF; its bounded self-check included), then the largest
difference between that export's last hidden states and an existing traced export's on the same
`--tokens` tokens (each graph loaded in turn, after the timed run).

    python -m benchmarks.builder_gguf [--model default] [--traced DIR] [--work /tmp/gguf15] [--keep]

The export runs once: when WORK already holds a finished export and its timing (an interrupted
comparison), only the comparison runs again. WORK is deleted afterwards unless --keep (6 GB for the
1.5B model). Writes benchmarks/results/builder_gguf/<model>-<cpuclass>-<date>.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from benchmarks import harness

TEXT = ("def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    \"\"\"Merge two sorted lists into one "
        "sorted list.\"\"\"\n    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n"
        "            out.append(a[i]); i += 1\n        else:\n            out.append(b[j]); j += 1\n    return out\n")


def last_hidden(export: Path, ids: list[int]) -> np.ndarray:
    """(T, H) last hidden states of a prefill of `ids` from an empty past."""
    from typed_decisions_export.ort_backbone import OrtBackbone

    hidden, _ = OrtBackbone(export / "model.onnx").prefill(ids)
    return np.asarray(hidden[0], dtype=np.float64)


def tokens(export: Path, n: int) -> list[int]:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(export / "tokenizer.json")).encode(TEXT, add_special_tokens=False).ids
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]


def main(argv: list[str] | None = None) -> int:
    from typed_decisions.models import cache_dir, resolve

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default", help="catalogue name (default: the default model)")
    p.add_argument("--traced", type=Path, default=None, help="a traced export of the same GGUF (default: the cache's)")
    p.add_argument("--work", type=Path, default=Path("/tmp/gguf15"))
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--keep", action="store_true", help="keep the builder export")
    p.add_argument("--out", type=Path, default=None, help="result file (default: benchmarks/results/builder_gguf/…)")
    args = p.parse_args(argv)
    load_start = os.getloadavg()
    name = resolve(args.model).name
    traced = args.traced or cache_dir() / "exports" / name
    timing = args.work.with_name(args.work.name + ".time.json")
    if not ((args.work / "manifest.json").is_file() and timing.is_file()):
        cmd = [sys.executable, "-m", "typed_decisions_export.cli", args.model, "--out", str(args.work), "--quiet"]
        run = harness.time_v(cmd, args.work.with_name(args.work.name + ".time.log")) | {"load_avg_after": list(os.getloadavg())}
        timing.write_text(json.dumps(run))
    run = json.loads(timing.read_text())
    manifest = json.loads((args.work / "manifest.json").read_text())
    ids = tokens(args.work, args.tokens)
    built = last_hidden(args.work, ids)
    gc.collect()
    ref = last_hidden(traced, ids)
    rows = np.abs(built - ref).max(axis=1) / np.maximum(1.0, np.abs(ref).max(axis=1))
    results = {
        "command": "/usr/bin/time -v python -m typed_decisions_export.cli "
                   f"{args.model} --out {args.work} --quiet",
        "wall_seconds": run["seconds"], "peak_rss_bytes": run["peak_rss_bytes"],
        "load_avg_after_export": run.get("load_avg_after"),
        "graph": manifest["export"]["graph"], "manifest_export": manifest["export"],
        "self_check": {"passed": manifest["self_check"]["passed"], "prefix": manifest["self_check"].get("prefix"),
                       "worst_hidden_rel": max(manifest["self_check"]["results"][k]["hidden_rel"]
                                               for k in ("prefill", "left_padded_batch", "cached_step_1",
                                                         "cached_step_3", "right_padded_suffixes"))},
        "vs_traced": {"traced_export": str(traced), "tokens": len(ids),
                      "max_hidden_rel": float(rows.max()), "max_hidden_abs": float(np.abs(built - ref).max())},
    }
    path = harness.write_result("builder_gguf", name, results, command=harness.command("benchmarks.builder_gguf", argv),
                                out=args.out, load_avg_start=load_start)
    print(json.dumps(results, indent=1))
    print(f"wrote {path}")
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
