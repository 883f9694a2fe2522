"""One block vs one packed level per tree level vs unpacked (tiny model), interleaved per trial so
that the shared machine's load hits every variant alike; wall and process CPU time (all threads).

    python -m benchmarks.studies.packed_levels FP32_EXPORT_DIR [--trials 3] [--threads 2] [--out FILE]

Prints one JSON line per workload and cache setting, and writes the schema-1 result
(results/packed_levels/...; the run of 2026-12-02 is there, docs/benchmarks.md "Tree blocks").
``per_level`` replaces ``typed_decisions.engine.schedule.subtree`` for its calls (each level's
siblings in one row): a study of a layout the engine does not use.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.workloads import workloads
from typed_decisions.decider import Decider
from typed_decisions.engine import schedule as E

VARIANTS = ("one_block", "per_level", "unpacked")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("--trials", type=int, default=3)
    args = harness.common_args(p).parse_args(argv)
    load_start = os.getloadavg()
    whole = E.subtree
    ds = {v: Decider.load(args.model, threads=args.threads, packed=v != "unpacked", label_mode="names")
          for v in VARIANTS}
    wls = workloads(ds["unpacked"].tokenizer)
    res: dict[str, dict] = {}
    try:
        for wl in ("W2", "W4", "W4-5"):
            for cache in ("off", "state"):
                u = cache == "state"
                wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
                cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
                probs = {}
                for trial in range(args.trials + 1):
                    for v in VARIANTS:
                        E.subtree = (lambda n, pending: [n]) if v == "per_level" else whole
                        d = ds[v]
                        if u and trial == 0:
                            d.engine.clear_cache()
                        r0 = d.engine.stats.runs
                        w0, c0 = time.perf_counter(), time.process_time()
                        got = d.probabilities(wls[wl], use_cache=u)
                        if trial:  # trial 0 is the warm-up (and stores the state)
                            wall[v].append(time.perf_counter() - w0)
                            cpu[v].append(time.process_time() - c0)
                        probs[v] = np.concatenate(list(got.values()))
                        res.setdefault(f"{wl}/cache-{cache}/{v}", {})["runs"] = d.engine.stats.runs - r0
                key = f"{wl}/cache-{cache}"
                for v in VARIANTS:
                    res[f"{key}/{v}"].update(wall_s=round(float(np.median(wall[v])), 3),
                                             cpu_s=round(float(np.median(cpu[v])), 3))
                res[f"{key}/unpacked_over_one_block_cpu"] = round(float(np.median(cpu["unpacked"]) / np.median(cpu["one_block"])), 2)
                res[f"{key}/per_level_over_one_block_cpu"] = round(float(np.median(cpu["per_level"]) / np.median(cpu["one_block"])), 2)
                res[f"{key}/max_dp_vs_unpacked"] = max(float(np.abs(probs[v] - probs["unpacked"]).max()) for v in VARIANTS)
                print(json.dumps({k: v for k, v in res.items() if k.startswith(key)}), flush=True)
    finally:
        E.subtree = whole
    harness.write_result("packed_levels", ds["unpacked"].name, res, out=args.out, load_avg_start=load_start,
                         command=harness.command("benchmarks.studies.packed_levels", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
