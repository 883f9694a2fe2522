"""One block vs one packed level per tree level vs unpacked (tiny model), interleaved per trial so
that the shared machine's load hits every variant alike; wall and process CPU time (all threads).

    python benchmarks/packed_levels.py FP32_EXPORT_DIR TRIALS

Prints JSON (docs/benchmarks.md, "Tree blocks").
"""
import json
import sys
import time

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from bench import workloads

from typed_decisions.engine import schedule as E
from typed_decisions.decider import Decider

model, trials = sys.argv[1], int(sys.argv[2])
whole = E.subtree
variants = ("one_block", "per_level", "unpacked")
ds = {v: Decider.from_dir(model, threads=2, packed=v != "unpacked", label_mode="names") for v in variants}
wls = workloads(ds["unpacked"].tokenizer)
res = {}
for wl in ("W2", "W4", "W4-5"):
    for cache in ("off", "state"):
        u = cache == "state"
        wall = {v: [] for v in variants}; cpu = {v: [] for v in variants}; probs = {}
        for trial in range(trials + 1):
            for v in variants:
                E.subtree = (lambda n, pending: [n]) if v == "per_level" else whole
                d = ds[v]
                if u and trial == 0:
                    d.engine.clear_cache()
                r0 = d.engine.stats.runs
                w0, c0 = time.perf_counter(), time.process_time()
                p = d.probabilities(wls[wl], use_cache=u)
                if trial:  # trial 0 is the warm-up (and stores the state)
                    wall[v].append(time.perf_counter() - w0); cpu[v].append(time.process_time() - c0)
                probs[v] = np.concatenate(list(p.values())); runs = d.engine.stats.runs - r0
                res.setdefault(f"{wl}/cache-{cache}/{v}", {})["runs"] = runs
        for v in variants:
            res[f"{wl}/cache-{cache}/{v}"].update(wall_s=round(float(np.median(wall[v])), 3), cpu_s=round(float(np.median(cpu[v])), 3))
        res[f"{wl}/cache-{cache}/unpacked_over_one_block_cpu"] = round(float(np.median(cpu["unpacked"]) / np.median(cpu["one_block"])), 2)
        res[f"{wl}/cache-{cache}/per_level_over_one_block_cpu"] = round(float(np.median(cpu["per_level"]) / np.median(cpu["one_block"])), 2)
        res[f"{wl}/cache-{cache}/max_dp_vs_unpacked"] = max(float(np.abs(probs[v] - probs["unpacked"]).max()) for v in variants)
        print(json.dumps({k: v for k, v in res.items() if k.startswith(f"{wl}/cache-{cache}")}), flush=True)
import os

print(json.dumps({"load_avg_end": os.getloadavg()}))
