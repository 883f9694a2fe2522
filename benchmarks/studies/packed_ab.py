"""Packed vs unpacked, interleaved: the bench's workloads (W1, W2, W4-5, ...) on one export, each
trial running the packed and the unpacked engine back to back (alternating which goes first), so
a drift in the machine's load or clock hits both alike. bench.py measures one configuration after
the other; this settles whether a difference between them is the engine or the order.

    python -m benchmarks.studies.packed_ab --model EXPORT_DIR [--workloads W1,W2,W4-5] [--trials 5] [--out FILE.json]

Prints one JSON object: per workload the seconds of every trial, the medians, packed/unpacked
speedup (unpacked median / packed median) with the range over trials of the paired ratios, the
runs per call and the largest difference between the two engines' probabilities.
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
from benchmarks.workloads import workloads
from typed_decisions.decider import Decider


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--workloads", default="W1,W2,W4-5")
    p.add_argument("--trials", type=int, default=5)
    harness.common_args(p, threads=None)
    args = p.parse_args(argv)
    load_start = os.getloadavg()

    engines = {"packed": Decider.load(args.model, threads=args.threads, cache_bytes=0, packed=True),
               "unpacked": Decider.load(args.model, threads=args.threads, cache_bytes=0, packed=False)}
    wls = workloads(engines["packed"].tokenizer)
    res: dict[str, dict] = {}
    for wl in args.workloads.split(","):
        req = wls[wl]
        for d in engines.values():  # warm-up: sessions, allocator, this shape
            d.run_many([req], use_cache=False)
        secs: dict[str, list[float]] = {k: [] for k in engines}
        runs: dict[str, int] = {}
        got: dict[str, np.ndarray] = {}
        for t in range(args.trials):
            order = list(engines) if t % 2 == 0 else list(engines)[::-1]
            for k in order:
                d = engines[k]
                before = d.engine.stats.runs
                t0 = time.perf_counter()
                got[k] = vector(d.run_many([req], use_cache=False)[0])
                secs[k].append(time.perf_counter() - t0)
                runs[k] = d.engine.stats.runs - before
        paired = [u / q for q, u in zip(secs["packed"], secs["unpacked"])]
        res[wl] = {"seconds": {k: [round(x, 3) for x in v] for k, v in secs.items()},
                   "median_s": {k: round(statistics.median(v), 3) for k, v in secs.items()},
                   "packed_speedup": round(statistics.median(secs["unpacked"]) / statistics.median(secs["packed"]), 3),
                   "paired_speedup_range": [round(min(paired), 3), round(max(paired), 3)],
                   "runs": runs, "max_abs_dp": float(np.abs(got["packed"] - got["unpacked"]).max())}
    print(json.dumps(res, indent=1))
    path = harness.write_result("packed_ab", engines["packed"].name, res, out=args.out, load_avg_start=load_start,
                                command=harness.command("benchmarks.studies.packed_ab", argv),
                                model_dir=str(args.model))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
