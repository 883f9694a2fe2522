"""Chunked prefill of one long prompt: each chunk's present as the next chunk's past (the engine
today) vs re-stacking every earlier chunk before each chunk (the engine before, O(n²/chunk)
copying), in one process on the same export. Prints one JSON line with the ratio.

    python benchmarks/prefill_chunks.py --model tiny --tokens 6000 --chunk 512 --trials 3
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import resolve_model  # noqa: E402

from typed_decisions.cpu import describe  # noqa: E402
from typed_decisions.decider import Decider  # noqa: E402
from typed_decisions.engine import Engine, KVRows  # noqa: E402
from typed_decisions.engine.kv import concat as _concat  # noqa: E402


class RestackingEngine(Engine):
    """The baseline: before each chunk, stack the parent's KV and every earlier chunk again."""

    def _run_group(self, group):  # type: ignore[no-untyped-def]
        if len(group) == 1 and len(group[0].tokens) > self.prefill_chunk:
            node = group[0]
            segs = node.parent.path_kv() if node.parent is not None else []
            own: list[KVRows] = []
            for at in range(0, len(node.tokens), self.prefill_chunk):
                run = node.tokens[at : at + self.prefill_chunk]
                hidden, present, past_len = self._run_rows([run], [segs + own])
                own.append(present.slice(0, past_len, past_len + len(run)))
            node.kv, node.hidden = _concat(own, self.backbone.kv_dtype), hidden[0]
            return
        super()._run_group(group)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--tokens", type=int, default=6000, help="about this many state tokens")
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    fp32_dir, _, _ = resolve_model(args.model)
    d = Decider.load(fp32_dir, threads=args.threads, cache_bytes=0)
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
    print(json.dumps({"model": d.name, "prompt_tokens": d.engine.stats.tokens_logical // (args.trials + 1),
                      "chunk": args.chunk, "cpu": describe(), "machine": platform.machine(),
                      "median_s": med, "restack_over_present": round(med["restack"] / med["present_as_past"], 3),
                      "max_abs_dp": float(np.abs(probs["restack"] - probs["present_as_past"]).max())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
