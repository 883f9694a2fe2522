"""The engine's ``prefill_chunk`` on ordinary work: bench's W1-W4, W5's requests in one call, a
~1,500-token state and jevcompat's 255-option choice, each answered with every chunk size in turn,
interleaved in one process on one export, cache off. The chunk caps every ONNX Runtime run's new
tokens (a long state is prefilled in chunks, and tree blocks never grow past it), so a smaller one
wastes less attention on masked columns (a chunk of C tokens after P computes C · (P + C) scores,
half of the last C² masked) but makes more runs, each copying its past.

    python -m benchmarks.studies.chunk_sizes --model EXPORT_DIR --chunks 2048,512,256 --rounds 3

Prints a line per workload (median seconds per chunk, each chunk's speed-up over the first, ONNX
Runtime runs per call) and writes the schema-1 result, which adds every round's seconds and the
largest probability difference from the first chunk (float sums in another order: ~1e-7).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.invariance import vector
from benchmarks.workloads import make_state, queue_choice, w5_requests, workloads
from typed_decisions.decider import Decider


def requests(tok: Any, model: str) -> dict[str, list[dict[str, Any]]]:
    """Each workload as the list of requests one ``run_many`` call answers."""
    w = {k: [{**r, "model": model}] for k, r in workloads(tok).items() if k != "W4-5"}
    w["W5x8"] = w5_requests(tok, model, 8)
    w["long-1500"] = [{"model": model, "state": make_state(tok, 1500),
                       "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for money back?"}}}]
    w["jev-255"] = [queue_choice(255, model)]
    return w


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="export directory")
    p.add_argument("--chunks", default="2048,512,256", help="prefill chunk sizes; ratios are against the first")
    p.add_argument("--workloads", default=None, help="a comma-separated subset (default: all)")
    p.add_argument("--rounds", type=int, default=3)
    harness.common_args(p)
    args = p.parse_args(argv)
    load_start = os.getloadavg()
    chunks = [int(c) for c in args.chunks.split(",")]

    d = Decider.load(args.model, threads=args.threads, cache_bytes=0)
    work = requests(d.tokenizer, d.name)
    if args.workloads:
        work = {k: work[k] for k in args.workloads.split(",")}

    def answer(reqs: list[dict[str, Any]], chunk: int) -> tuple[list[np.ndarray], int]:
        d.engine.prefill_chunk = chunk
        before = d.engine.stats.runs
        out = [vector(r) for r in d.run_many(reqs, use_cache=False)]
        return out, d.engine.stats.runs - before

    results: dict[str, Any] = {}
    for name, reqs in work.items():
        fns = {str(c): (lambda c=c: answer(reqs, c)) for c in chunks}
        times, outs = harness.interleaved(fns, args.rounds)
        med = {c: statistics.median(t) for c, t in times.items()}
        first = str(chunks[0])
        results[name] = {
            "seconds": {c: [round(x, 4) for x in t] for c, t in times.items()},
            "median_s": {c: round(m, 4) for c, m in med.items()},
            "speedup_vs_first": {c: round(med[first] / m, 3) for c, m in med.items()},
            "runs": {c: o[1] for c, o in outs.items()},
            "max_abs_dp_vs_first": {c: float(max(np.abs(a - b).max() for a, b in zip(o[0], outs[first][0])))
                                    for c, o in outs.items()},
        }
        print(name, json.dumps({k: results[name][k] for k in ("median_s", "speedup_vs_first", "runs")}), flush=True)
    out = {"model_dir": str(args.model), "chunks": chunks, "rounds": args.rounds, "threads": args.threads,
           "workloads": results}
    path = harness.write_result("chunk_sizes", d.name, out, command=harness.command("benchmarks.studies.chunk_sizes", argv),
                                out=args.out, load_avg_start=load_start)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
