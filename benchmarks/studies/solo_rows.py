"""Long blocks alone vs stacked: W5's requests (W2's three questions about different ~300-token
tickets) answered in one ``run_many`` call with the engine's ``solo_tokens`` rule (blocks of at
least that many tokens run as their own runs) against every block stacked into shared runs (the
engine before the rule) and against one call per request, interleaved in one process.

    python -m benchmarks.studies.solo_rows --model EXPORT_DIR [--requests 8] [--trials 2] [--out FILE.json]

Prints one JSON object: median seconds per mode, ratios against stacked, runs per mode, and the
largest difference between the modes' probabilities (they must agree: rows are independent).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.invariance import vector
from benchmarks.workloads import w5_requests
from typed_decisions.decider import Decider

STACKED = 1 << 30  # solo_tokens that no block reaches: every block stacked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--trials", type=int, default=2)
    harness.common_args(p, threads=None)
    args = p.parse_args(argv)
    load_start = os.getloadavg()

    d = Decider.load(args.model, threads=args.threads, cache_bytes=0)
    solo_default = d.engine.solo_tokens
    reqs = w5_requests(d.tokenizer, "bench", args.requests)

    def run(mode: str) -> list[np.ndarray]:
        d.engine.solo_tokens = STACKED if mode == "stacked" else solo_default
        if mode == "sequential":
            return [vector(d.run_many([r], use_cache=False)[0]) for r in reqs]
        return [vector(r) for r in d.run_many(reqs, use_cache=False)]

    modes = ("stacked", "solo", "sequential")
    run("solo")  # warm-up (session, allocator)
    times: dict[str, list[float]] = {m: [] for m in modes}
    runs: dict[str, int] = {}
    answers: dict[str, list[np.ndarray]] = {}
    for _ in range(args.trials):
        for m in modes:  # interleaved, so drift in the machine's load hits every mode alike
            before = d.engine.stats.runs
            t = time.perf_counter()
            answers[m] = run(m)
            times[m].append(time.perf_counter() - t)
            runs[m] = d.engine.stats.runs - before
    med = {m: statistics.median(v) for m, v in times.items()}
    out = {
        "model_dir": str(args.model), "requests": len(reqs), "solo_tokens": solo_default,
        "seconds": {m: [round(x, 3) for x in v] for m, v in times.items()},
        "median_s": {m: round(v, 3) for m, v in med.items()},
        "speedup_vs_stacked": {m: round(med["stacked"] / med[m], 3) for m in modes},
        "runs": runs,
        "max_abs_dp_vs_sequential": {m: float(max(np.abs(a - b).max() for a, b in zip(answers[m], answers["sequential"])))
                                     for m in modes},
    }
    print(json.dumps(out, indent=1))
    path = harness.write_result("solo_rows", d.name, out, command=harness.command("benchmarks.studies.solo_rows", argv),
                                out=args.out, load_avg_start=load_start)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
