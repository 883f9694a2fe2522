"""Ray Data labelling (``ray_typed_decisions.label_dataset``) against ``Decider.run_many`` in one
process, on the same export, the same rows and the same batch size, all on this machine's cores.

Systems (each answers every row; the answers are compared with the baseline's):

- ``run_many_t{cpus}`` and ``run_many_t1``: one process, one Decider with ``--cpus`` (or 1) ONNX
  Runtime threads, ``run_many`` over consecutive batches of ``--batch-size`` rows (model loaded
  before the clock starts). Each runs before and after the Ray systems (on shared cores the load
  changes); the ratios use the mean of the two, against the faster of the two thread counts (on
  this project's loaded 2-core machine 1 thread beat 2: ORT's threads wait on each other when
  other jobs hold the cores).
- ``ray_1x{cpus}``: one actor reserving all ``--cpus`` CPUs (as many ORT threads).
- ``ray_{cpus}x1``: ``--cpus`` actors of 1 CPU each (1 ORT thread each).

The Ray times are end to end from ``label_dataset`` to the last row in the driver, actor start and
model load included (the cluster itself is started before the clock); ``load_s`` is the baseline's
model load, for comparison. Every row's text is distinct (no prefix shared across rows beyond the
chat template). Prints a table and, last, one JSON line: rows/s per system and the ratios
ray / run_many (> 1 = Ray faster).

    python -m benchmarks.studies.ray_label --rows 120 --batch-size 20
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Payments, refunds", "tech": "Bugs, outages", "sales": "Plans, upgrades"}},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
}
ISSUES = ["was charged twice", "cannot log in", "wants a bigger plan", "got a broken item",
          "sees an outage", "asks for a refund", "found a bug in the export", "lost the invoice"]


def default_model() -> Path:
    from typed_decisions.models import cache_dir

    found = sorted((cache_dir() / "exports").glob("test-smollm2-135m-[0-9a-f]*"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit("no tiny export in the cache: run the model tests once, or pass --model DIR")
    return found[-1]


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "text": f"Ticket {i}: customer {i * 7919 % 10007} {ISSUES[i % len(ISSUES)]} "
                             f"on order #{100000 + i * 31}."} for i in range(n)]


def max_abs_diff(got: list[dict[str, Any]], want: dict[int, Any]) -> float:
    worst = 0.0
    for row in got:
        a = want[row["id"]].answers
        worst = max(worst, abs(row["urgent"] - a["urgent"].noul),
                    *(abs(row[f"team__p__{o}"] - p) for o, p in a["team"].probabilities.items()))
    return worst


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None, help="export directory (default: the tiny test export)")
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--cpus", type=int, default=2, help="CPUs for every system (default 2)")
    p.add_argument("--out", type=Path, default=None, help="result file (default: harness.result_path)")
    args = p.parse_args()
    model = str((args.model or default_model()).resolve())
    data = rows(args.rows)

    from typed_decisions.cpu import describe
    from typed_decisions.decider import Decider

    results: dict[str, dict[str, float]] = {}
    want: dict[int, Any] = {}

    def baseline(name: str, threads: int) -> None:
        t0 = time.perf_counter()
        decider = Decider.load(model, threads=threads)  # a fresh one: an empty prefix cache
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for at in range(0, len(data), args.batch_size):
            batch = data[at: at + args.batch_size]
            for row, r in zip(batch, decider.run_many([{"model": decider.name, "state": x["text"],
                                                         "questions": QUESTIONS} for x in batch])):
                want[row["id"]] = r
        seconds = time.perf_counter() - t0
        results[name] = {"seconds": seconds, "rows_per_s": len(data) / seconds, "load_s": load_s}

    for threads in (args.cpus, 1):
        baseline(f"run_many_t{threads}_before", threads)

    import ray
    from ray_typed_decisions import label_dataset

    from benchmarks.studies import ray_cluster

    ray_cluster.start(args.cpus)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray.data.from_items([{"x": 1}]).materialize()  # Ray Data's own start-up, off the clock
    for name, actors, cpus in ((f"ray_1x{args.cpus}", 1, args.cpus), (f"ray_{args.cpus}x1", args.cpus, 1)):
        ds = ray.data.from_items(data)
        t0 = time.perf_counter()
        got = label_dataset(ds, QUESTIONS, model, batch_size=args.batch_size, concurrency=actors,
                            num_cpus=cpus).take_all()
        seconds = time.perf_counter() - t0
        assert sorted(r["id"] for r in got) == list(range(len(data))), name
        results[name] = {"seconds": seconds, "rows_per_s": len(data) / seconds,
                         "max_abs_dp": max_abs_diff(got, want)}
    ray.shutdown()
    for threads in (1, args.cpus):
        baseline(f"run_many_t{threads}_after", threads)

    means = {t: (results[f"run_many_t{t}_before"]["rows_per_s"] + results[f"run_many_t{t}_after"]["rows_per_s"]) / 2
             for t in (args.cpus, 1)}
    best = max(means, key=means.__getitem__)
    ratios = {k: round(v["rows_per_s"] / means[best], 3) for k, v in results.items() if k.startswith("ray")}
    ratios["baseline"] = f"run_many_t{best}"  # type: ignore[assignment]
    print(f"{'system':20s} {'seconds':>8s} {'rows/s':>8s}  (CPU: {describe()}; {platform.machine()})")
    for k, v in results.items():
        print(f"{k:20s} {v['seconds']:8.2f} {v['rows_per_s']:8.2f}  " +
              ", ".join(f"{m}={x:.3g}" for m, x in v.items() if m not in ("seconds", "rows_per_s")))
    report = {"rows": len(data), "batch_size": args.batch_size, "cpus": args.cpus, "cpu": describe(),
              "worker_niceness": ray_cluster.WORKER_NICENESS,
              "results": results, "ratios_vs_run_many_mean": ratios,
              "load_average": list(os.getloadavg())}
    from benchmarks import harness

    harness.write_result("ray_label", Path(model).name, report, out=args.out,
                         command=harness.command("benchmarks.studies.ray_label"))
    print(json.dumps({"rows_per_s": {k: round(v["rows_per_s"], 2) for k, v in results.items()},
                      "ratios_vs_run_many_mean": ratios}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
