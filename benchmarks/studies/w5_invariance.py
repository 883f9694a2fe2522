"""One answer per request, checked on W5's requests in process: each request alone (one
``Decider.run`` after another) against the same requests in one ``run_many`` call, both after the
bench's W1 warm-up (which caches the chat head), in the label mode given.

    python -m benchmarks.studies.w5_invariance --model EXPORT_DIR [--tickets 1,3,5,7,9,11,13,15] [--labels names]

Prints one JSON object: per ticket the largest |difference| of any probability, and the maximum;
the same goes to ``benchmarks/results/w5_invariance/<model>-<cpuclass>-<date>.json``
(``harness.write_result``, keyed by ``Decider.model_key``, so an INT8 export's file stands apart
from its float model's; ``--out`` to choose), whose path is said on stderr.
The default tickets reproduce what the HTTP W5 run found on Zen 5 (2026-12-03, docs/benchmarks.md)
before requests shared only whole segments (docs/METHOD.md; now 0.0 for every ticket):
with INT8, the tickets whose states share a first token run with another state of the batch
("Ticket #1." and "Ticket #11.") differ from their lone answers by ~0.02-0.03; float32 by ~1e-7.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.invariance import vector
from benchmarks.workloads import w5_requests, workloads
from typed_decisions.cpu import cpu_class, cpu_model
from typed_decisions.decider import Decider


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--tickets", default="1,3,5,7,9,11,13,15", help="W5 ticket numbers (1-based) asked together")
    p.add_argument("--labels", default="names")
    args = harness.common_args(p, threads=None).parse_args(argv)
    load_start = os.getloadavg()
    tickets = [int(t) for t in args.tickets.split(",")]

    def decider() -> Decider:
        d = Decider.load(args.model, threads=args.threads, label_mode=args.labels)
        d.run({**workloads(d.tokenizer)["W1"], "model": d.name})  # the bench's warm-up: caches the chat head
        return d

    alone_d, batch_d = decider(), decider()
    reqs = w5_requests(alone_d.tokenizer, alone_d.name, max(tickets))
    asked = [reqs[t - 1] for t in tickets]
    alone = [vector(alone_d.run(r)) for r in asked]
    together = [vector(r) for r in batch_d.run_many(asked)]
    diffs = {t: float(np.abs(a - b).max()) for t, a, b in zip(tickets, alone, together)}
    found = {"labels": args.labels, "max_abs_dp_per_ticket": diffs, "max_abs_dp": max(diffs.values())}
    path = harness.write_result("w5_invariance", alone_d.model_key,  # the CPU is the file's machine record
                                {"export": str(args.model), "threads": args.threads, **found},
                                command=harness.command("benchmarks.studies.w5_invariance", argv), out=args.out,
                                load_avg_start=load_start)
    print(json.dumps({"model": str(args.model), "cpu_class": cpu_class(), "cpu": cpu_model(), **found}, indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
