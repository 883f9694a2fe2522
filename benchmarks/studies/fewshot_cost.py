"""What few-shot examples (issue #14, lever 6) cost per request on one export: prompt tokens and
wall time for 0/2/4/8 examples, with a cold prefix cache and with the examples already cached.

The request is levers_cost.py's (a 4-option choice and a 3-level score question about a short
support ticket); example k is a labelled ticket answering both questions, so k examples add 2k
user/assistant turns before the state. For each k and each of ``--states`` distinct states:

- cold: the prefix cache is cleared first (a state never seen, examples never seen);
- warm: the examples' head (system + example turns, ``CompiledRequest.checkpoints[0]``) is
  cached by an earlier request with another state, as in a service asking the same preset of
  every message; only the new state, the question suffixes and the labels are computed.

Reported per k: prompt tokens per question prompt (prefix + longest suffix), the cached head,
tokens run through the model (``EngineStats.tokens_computed``) and the median wall time, cold
and warm. Accuracy is the sweep's job (benchmarks/sweep.py, settings auto-2shot/4shot/8shot).

    python -m benchmarks.studies.fewshot_cost --model DIR --states 8 --threads 2 [--out results.json]
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from benchmarks import harness
from benchmarks.studies.levers_cost import QUESTIONS, STATES
from typed_decisions.decider import Decider, parse_request

SHOTS = (0, 2, 4, 8)
EXAMPLES: list[dict[str, Any]] = [
    {"state": "Please refund the second charge on my card from last Tuesday.", "answers": {"team": "billing", "severity": "1"}},
    {"state": "Every page returns HTTP 500 since the deploy, nobody can log in.", "answers": {"team": "technical", "severity": "2"}},
    {"state": "What would 40 seats on the annual plan cost?", "answers": {"team": "sales", "severity": "0"}},
    {"state": "Where can I change the language of my profile?", "answers": {"team": "other", "severity": "0"}},
    {"state": "My invoice shows the wrong VAT number.", "answers": {"team": "billing", "severity": "1"}},
    {"state": "The export button does nothing in Firefox.", "answers": {"team": "technical", "severity": "1"}},
    {"state": "Do you offer a discount for non-profits?", "answers": {"team": "sales", "severity": "0"}},
    {"state": "You charged me after I cancelled, I need the money back today.", "answers": {"team": "billing", "severity": "2"}},
]


def measure(d: Decider, k: int, states: list[str]) -> dict[str, Any]:
    def req(state: str) -> dict[str, Any]:
        return {"model": d.name, "state": state, "questions": QUESTIONS, **({"examples": EXAMPLES[:k]} if k else {})}

    def timed(state: str) -> tuple[float, int]:
        before = d.engine.stats.tokens_computed
        t0 = time.perf_counter()
        d.run(req(state))
        return time.perf_counter() - t0, d.engine.stats.tokens_computed - before

    comp = d.compiler.compile(parse_request(req(states[0])))
    cold = []
    for s in states:
        d.engine.clear_cache()
        cold.append(timed(s))
    d.engine.clear_cache()
    d.run(req("An earlier message about something else."))  # caches the examples' head
    warm = [timed(s) for s in states]
    return {"shots": k, "prompt_tokens": len(comp.prefix_ids) + max(len(q.suffix_ids) for q in comp.questions),
            "head_tokens": comp.checkpoints[0], "prefix_tokens": len(comp.prefix_ids),
            "cold_tokens_computed": statistics.median(t for _, t in cold),
            "cold_median_ms": round(1000 * statistics.median(t for t, _ in cold), 1),
            "warm_tokens_computed": statistics.median(t for _, t in warm),
            "warm_median_ms": round(1000 * statistics.median(t for t, _ in warm), 1)}


def main(argv: list[str] | None = None) -> None:
    args, d, states, load_start = harness.states_study(__doc__, argv, STATES, QUESTIONS)
    rows = []
    for k in SHOTS:
        rows.append(measure(d, k, states))
        print(json.dumps(rows[-1]), flush=True)
    result = {"states": len(states), "threads": args.threads, "rows": rows}
    harness.write_result("fewshot_cost", d.name, result, command=harness.command("benchmarks.studies.fewshot_cost", argv),
                         out=args.out, load_avg_start=load_start)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


if __name__ == "__main__":
    main()
