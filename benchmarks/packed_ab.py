"""Packed vs unpacked, interleaved: the bench's workloads (W1, W2, W4-5, ...) on one export, each
trial running the packed and the unpacked engine back to back (alternating which goes first), so
a drift in the machine's load or clock hits both alike. bench.py measures one configuration after
the other; this settles whether a difference between them is the engine or the order.

    python benchmarks/packed_ab.py --model EXPORT_DIR [--workloads W1,W2,W4-5] [--trials 5] [--out FILE.json]

Prints one JSON object: per workload the seconds of every trial, the medians, packed/unpacked
speedup (unpacked median / packed median) with the range over trials of the paired ratios, the
runs per call and the largest difference between the two engines' probabilities.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench import workloads  # noqa: E402
from td_invariance import vector  # noqa: E402

from typed_decisions.cpu import cpu_class, cpu_model  # noqa: E402
from typed_decisions.decider import Decider  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--workloads", default="W1,W2,W4-5")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    engines = {"packed": Decider.from_dir(args.model, threads=args.threads, cache_bytes=0, packed=True),
               "unpacked": Decider.from_dir(args.model, threads=args.threads, cache_bytes=0, packed=False)}
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
    out = {"command": "python benchmarks/packed_ab.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "model": str(args.model), "cpu_class": cpu_class(), "cpu": cpu_model(), "load_avg_end": os.getloadavg()[0],
           "results": res}
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
