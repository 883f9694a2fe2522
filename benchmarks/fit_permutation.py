"""Option-order robustness of fitted choice heads (issue #31): does the head flip when the options
are listed in another order, and does fitting over rotations of the order fix it?

For each choice set, a head is fitted on the first ``--k`` calibration rows of each class twice:
read in the listed order only (``rotations=1``), and under every cyclic rotation of the options
(``rotations=C``, the rows' lines grouped for CV). Each of ``--test`` test rows is then re-asked
under ``--perms`` random orders (evaluation.permutation: the same orders for every readout) and the
flip rate (share of orders whose top option differs from the listed order's) and the mean total
variation are reported for zero-shot, the listed-order head and the rotation head, with each one's
accuracy in the listed order, each with a 95 % percentile-bootstrap interval over the test rows
(``--boot`` resamples, seed 0, the same for every readout, so each head's difference from zero-shot
is paired), and the per-row values, so a later reading can combine runs. Each (row, order) is read once (``Decider.features``: the hidden
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
from benchmarks.fit_curves import interval
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset
from typed_decisions.evaluation.fit_cli import first_per_class, head_rows
from typed_decisions.evaluation.permutation import permutation_report


def row_interval(x: np.ndarray, idx: np.ndarray) -> list[float]:
    """[mean of the per-row values x, 2.5 %, 97.5 %] over the bootstrap resamples idx (b, n) of the
    rows (``fit_curves.interval``: the resamples' means, the all-rows mean last).

    >>> row_interval(np.array([0.0, 1.0]), np.array([[0, 0], [1, 1], [0, 1]]))
    [0.5, 0.025, 0.975]
    """
    return interval(np.append(x[idx].mean(axis=1), x.mean()))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--datasets", default="trec,rotten-tomatoes,debates-2016")
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--test", type=int, default=60)
    p.add_argument("--perms", type=int, default=3)
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples of the test rows")
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
        idx = np.random.default_rng(0).integers(0, len(test), size=(args.boot, len(test)))
        zero: dict[str, np.ndarray] = {}  # the zero-shot readout's per-row values, first in the loop
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
            rows = {"flip_rate": np.array(flips), "mean_tv": np.array(tvs), "accuracy": np.array(correct, dtype=float)}
            entry[label] = {m: row_interval(v, idx) for m, v in rows.items()}
            if head is None:
                zero = rows
            else:
                entry[label]["minus_zero_shot"] = {m: row_interval(v - zero[m], idx) for m, v in rows.items()}
            entry[label]["_rows"] = {m: [round(float(x), 4) for x in v] for m, v in rows.items()}
            print(f"{name} {label}: { {m: v for m, v in entry[label].items() if m != '_rows'} }", flush=True)
        results[name] = {"k": args.k, "test_rows": len(test), "perms": args.perms, **entry}
    path = harness.write_result("fit_permutation", decider.model_key, results, out=args.out, load_avg_start=load_start,
                                command=harness.command("benchmarks.fit_permutation"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
