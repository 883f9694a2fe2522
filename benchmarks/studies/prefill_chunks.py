"""Chunked prefill of one long prompt: each chunk's present as the next chunk's past (the engine
today) vs re-stacking every earlier chunk before each chunk (the engine before, O(n²/chunk)
copying), in one process on the same export. Prints one JSON line with the ratio and writes the
schema-1 result (results/prefill_chunks/...).

    python -m benchmarks.studies.prefill_chunks --model tiny --tokens 6000 --chunk 512 --trials 3

``RestackingEngine`` overrides ``Engine._run_group`` (the engine's private chunking step) for a lone
long edge; it follows the engine's internals as of the engine/ package (#30) and must be updated
with them (tests/benchmarks/test_studies.py runs it on the tiny model).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks import harness
from typed_decisions.decider import Decider
from typed_decisions.engine import Engine, KVRows
from typed_decisions.engine.kv import concat, stack_paths
from typed_decisions.engine.tree_block import chain


class RestackingEngine(Engine):
    """The baseline: before each chunk, stack the parent's KV and every earlier chunk again."""

    def _run_group(self, group):  # type: ignore[no-untyped-def]
        if len(group) == 1 and len(group[0]) == 1 and len(group[0][0].tokens) > self.prefill_chunk:
            node = group[0][0]
            segs = node.parent.path_kv() if node.parent is not None else []
            own: list[KVRows] = []
            for at in range(0, len(node.tokens), self.prefill_chunk):
                run = node.tokens[at : at + self.prefill_chunk]
                path = segs + own
                past = stack_paths([path], self.backbone.kv_dtype) if path else self.backbone.empty(1)
                hidden, present = self._run_blocks([chain(run)], past)                  # (1, S, H)
                own.append(present.slice(0, past.length, past.length + len(run)))
            node.kv, node.hidden = concat(own, self.backbone.kv_dtype), hidden[0, -1].copy()
            return
        super()._run_group(group)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="export directory or catalogue name (Decider.load)")
    p.add_argument("--tokens", type=int, default=6000, help="about this many state tokens")
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--trials", type=int, default=3)
    args = harness.common_args(p).parse_args(argv)
    load_start = os.getloadavg()
    d = Decider.load(args.model, threads=args.threads, cache_bytes=0)
    words = " ".join(f"item{i % 97} costs {i % 13} dollars." for i in range(args.tokens // 6))
    req = {"model": d.name, "state": words, "questions": {"q": {"type": "noul", "instructions": "Is it cheap?"}}}
    times: dict[str, list[float]] = {"present_as_past": [], "restack": []}
    probs = {}
    for name, cls in (("present_as_past", Engine), ("restack", RestackingEngine)):
        d.engine = cls(d.artifacts, threads=args.threads, cache_bytes=0, prefill_chunk=args.chunk)
        d.probabilities(req)  # warm-up
        for _ in range(args.trials):
            t = time.perf_counter()
            probs[name] = d.probabilities(req)["q"]
            times[name].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    res = {"prompt_tokens": d.engine.stats.tokens_logical // (args.trials + 1), "chunk": args.chunk,
           "trials": args.trials, "median_s": med, "restack_over_present": round(med["restack"] / med["present_as_past"], 3),
           "max_abs_dp": float(np.abs(probs["restack"] - probs["present_as_past"]).max())}
    print(json.dumps(res))
    harness.write_result("prefill_chunks", d.name, res, out=args.out, load_avg_start=load_start,
                         command=harness.command("benchmarks.studies.prefill_chunks", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
