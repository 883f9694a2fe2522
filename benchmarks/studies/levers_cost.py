"""What the request-side levers of issue #14 cost on one export: label modes (names, letters,
mixture), ``debias="canonical"`` and ``"rotate"`` and the label mass, per request, from a cold prefix cache.

For each setting and each of ``--states`` distinct short states, one request with a 4-option choice
question and a 3-level score question is answered with the prefix cache cleared first (so the
state prefix is prefilled every time, as for a state never seen). Reported per setting: the median
wall time per request, tokens run through the model (``EngineStats.tokens_computed``), ORT runs,
readouts (engine contexts), and for the label mass the time of ``Engine.full_logsumexp`` alone.
Accuracy is not measured here: that is the sweep's job (benchmarks/sweep.py).

    python -m benchmarks.studies.levers_cost --model DIR --states 8 --threads 2 [--out results.json]
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from benchmarks import harness
from typed_decisions.decider import parse_request
from typed_decisions.readout_plan import plan_readout

STATES = ["I was charged twice for my subscription and want a refund.",
          "The app crashes every time I open the settings page on Android 14.",
          "Can I get a discount if I buy 50 seats for my company?",
          "My password reset email never arrives, I checked spam too.",
          "Please send last month's invoice as a PDF.",
          "URGENT: production is down, all users get HTTP 500.",
          "The new dashboard is great, thanks to the team!",
          "I want to cancel my plan before the renewal date."]
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing": "Payments, invoices, refunds", "technical": "Bugs, outages, login",
                          "sales": "Quotes, discounts, plans", "other": None}},
    "severity": {"type": "score", "instructions": "How severe is the problem for the customer?",
                 "criteria": ["low", "medium", "high"]},
}
SETTINGS = [("names", "none", False), ("letters", "none", False), ("mixture", "none", False),
            ("letters", "rotate", False), ("mixture", "rotate", False), ("auto", "none", True),
            ("auto", "none", False), ("auto", "canonical", False), ("auto", "rotate", False)]


def main(argv: list[str] | None = None) -> None:
    args, d, states, load_start = harness.states_study(__doc__, argv, STATES, QUESTIONS)
    rows = []
    for mode, debias, mass in SETTINGS:
        times, tokens, runs, contexts = [], [], [], []
        for s in states:
            req = {"model": d.name, "state": s, "questions": QUESTIONS, "debias": debias,
                   **({"include": ["label_mass"]} if mass else {})}
            d.engine.clear_cache()
            before = (d.engine.stats.tokens_computed, d.engine.stats.runs)
            t0 = time.perf_counter()
            d.run(req, label_mode=mode)
            times.append(time.perf_counter() - t0)
            tokens.append(d.engine.stats.tokens_computed - before[0])
            runs.append(d.engine.stats.runs - before[1])
            comp = d.compiler.compile(parse_request(req), label_mode=mode)
            contexts.append(len(plan_readout([comp], read_roots=mass).contexts))
        row = {"labels": mode, "debias": debias, "label_mass": mass,
               "median_ms": round(1000 * statistics.median(times), 1), "tokens_computed": statistics.median(tokens),
               "ort_runs": statistics.median(runs), "readouts": statistics.median(contexts)}
        if mass:
            h = np.random.default_rng(0).standard_normal(d.artifacts.architecture.hidden_size).astype(np.float32)
            t = []
            for _ in range(5):
                t0 = time.perf_counter()
                d.engine.full_logsumexp(h)
                t.append(time.perf_counter() - t0)
            row["full_logsumexp_ms"] = round(1000 * statistics.median(t), 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"vocab": int(d.engine.lm_head.shape[0]), "states": len(states), "threads": args.threads, "rows": rows}
    harness.write_result("levers_cost", d.name, result, command=harness.command("benchmarks.studies.levers_cost", argv),
                         out=args.out, load_avg_start=load_start)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


if __name__ == "__main__":
    main()
