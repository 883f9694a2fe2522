"""Does what ``typed-decisions fit`` prints predict the head's test outcome? (issue #31)

``fit`` reports, on the rows it was fitted on, the head's cross-validated accuracy beside the
zero-shot reading's and their paired difference with a 95 % interval (``fit.fit_head``'s
``cv_gain``). This refits the heads of a ``fit_curves`` run from its feature cache (no model is
loaded, nothing is read; rows in the listed order, as ``fit_curves`` reads them) and prints, per set
and k, that fit-time comparison beside the test-row difference the run measured:

    python -m benchmarks.fit_cv_check RESULT.json --ks 2,8

RESULT.json is a ``fit_curves`` result; its cache is ``RESULT.features.npz`` beside the file the
run wrote (``--cache`` to name another).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.fit_curves import FeatureCache
from typed_decisions.evaluation.datasets import load_dataset
from typed_decisions.evaluation.fit_cli import first_per_class, head_rows
from typed_decisions.head_regression import fit_head


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("result", type=Path, help="a fit_curves result JSON")
    p.add_argument("--cache", type=Path, help="its feature cache (default: from the result's --out)")
    p.add_argument("--ks", default="2,8", help="rows per class, among the run's --ks")
    args = p.parse_args()
    run = json.loads(args.result.read_text())
    command = run["command"].split()
    cache_path = args.cache or Path(command[command.index("--out") + 1]).with_suffix(".features.npz")
    cache = FeatureCache(cache_path)
    ks = [int(k) for k in args.ks.split(",")]
    agree = total = 0
    for name, entry in run["results"]["sets"].items():
        cal = load_dataset(name, "calibration")
        spec = cal.question
        gold = [spec.gold_index(r, n) for n, r in enumerate(cal.rows)]
        train = [cal.rows[i] for i in first_per_class(gold, max(map(int, entry["fitted"]["rows"])))]
        h, probs = cache.read(None, f"{name}/train", spec.question(), head_rows(spec, train))  # type: ignore[arg-type]
        y = np.array([spec.gold_index(r, n) for n, r in enumerate(train)])
        for k in ks:
            sub = np.array(first_per_class(list(y), k))
            f = fit_head(h[sub], probs[sub], y[sub], method="free")
            test = entry["fitted"]["rows"][str(k)]["accuracy_minus_zero_shot"]
            gain, low, high = f.cv_gain  # type: ignore[misc]
            same_sign = np.sign(gain) == np.sign(test[0])
            agree, total = agree + int(same_sign), total + 1
            print(f"{name:20s} k={k:<3d} fit: CV {f.cv_accuracy:.3f} vs zero-shot {f.zero_shot_accuracy:.3f} on "
                  f"{sub.size} rows, gain {gain:+.3f} [{low:+.3f}, {high:+.3f}]{' (note)' if low <= 0 else '       '} | "
                  f"test: {test[0]:+.3f} [{test[1]:+.3f}, {test[2]:+.3f}]", flush=True)
    print(f"fit-time sign equals the test sign on {agree} of {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
