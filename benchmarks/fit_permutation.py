"""Option-order robustness of fitted choice heads (issue #31): does the head flip when the options
are listed in another order, and does fitting over rotations of the order fix it?

For each choice set, a head is fitted on the first ``--k`` calibration rows of each class twice:
read in the listed order only (``rotations=1``), and under every cyclic rotation of the options
(``rotations=C``, the rows' lines grouped for CV). Each of ``--test`` test rows is then re-asked
under ``--perms`` random orders (evaluation.permutation: the same orders for every readout) and the
flip rate (share of orders whose top option differs from the listed order's) and the mean total
variation are reported for zero-shot, the listed-order head and the rotation head, with each one's
accuracy in the listed order. Each (row, order) is read once (``Decider.features``: the hidden
state and the zero-shot probabilities) and every readout is computed from that one read, so the
readouts are compared on the very same states and the run costs a third of asking each.

    python -m benchmarks.fit_permutation --model DIR --datasets trec,rotten-tomatoes,debates-2016

writes benchmarks/results/fit_permutation/<model>-<cpuclass>-<date>.json (``harness.write_result``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

from benchmarks import harness
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset
from typed_decisions.evaluation.fit import first_per_class, head_rows
from typed_decisions.evaluation.permutation import permutation_report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--datasets", default="trec,rotten-tomatoes,debates-2016")
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--test", type=int, default=60)
    p.add_argument("--perms", type=int, default=3)
    harness.common_args(p, threads=None)
    args = p.parse_args()
    load_start = os.getloadavg()
    decider = Decider.load(args.model, threads=args.threads)
    results: dict[str, Any] = {}
    for name in harness.datasets_or_exit(args.datasets):
        cal = load_dataset(name, "calibration")
        spec = cal.question
        if spec.type != "choice":
            continue
        gold = [spec.gold_index(r, n) for n, r in enumerate(cal.rows)]
        train = [cal.rows[i] for i in first_per_class(gold, args.k)]
        test = load_dataset(name, "test", args.test).rows
        q = spec.question()
        heads = {"listed order": decider.fit(q, head_rows(spec, train), rotations=1),
                 f"{len(spec.options)} rotations": decider.fit(q, head_rows(spec, train), rotations=len(spec.options))}
        seen: dict[tuple[int, tuple[int, ...]], tuple[np.ndarray, np.ndarray]] = {}

        def read(n: int, order: list[int]) -> tuple[np.ndarray, np.ndarray]:
            """Row n asked with its options shown in ``order``: the hidden state and the zero-shot
            probabilities in class order, read once and shared by every readout."""
            key = (n, tuple(order))
            if key not in seen:
                row = head_rows(spec, [test[n]])[0]
                h, p, _ = decider.features(spec.question(order), [row])
                p_class = np.empty(len(order))
                p_class[order] = p[0]  # features answers in the shown order; back to class order
                seen[key] = h[0], p_class
            return seen[key]

        entry: dict[str, Any] = {}
        for label, head in [("zero-shot", None), *heads.items()]:
            flips, tvs, correct = [], [], []
            for n in range(len(test)):
                def probs_for(order: list[int], n: int = n, head: Any = head) -> np.ndarray:
                    h, p = read(n, order)
                    probs = p if head is None else head.probabilities(h, p)
                    return probs[order]  # in the shown order, as permutation_report compares

                rep = permutation_report(probs_for, list(range(len(spec.options))), k=args.perms, seed=n)
                flips.append(rep.flip_rate)
                tvs.append(rep.mean_tv)
                correct.append(int(np.argmax(rep.identity_probs)) == spec.gold_index(test[n], n))
            entry[label] = {"flip_rate": round(float(np.mean(flips)), 4), "mean_tv": round(float(np.mean(tvs)), 4),
                            "accuracy": round(float(np.mean(correct)), 4)}
            print(f"{name} {label}: {entry[label]}", flush=True)
        results[name] = {"k": args.k, "test_rows": len(test), "perms": args.perms, **entry}
    path = harness.write_result("fit_permutation", decider.model_key, results, out=args.out, load_avg_start=load_start,
                                command=harness.command("benchmarks.fit_permutation"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
