"""The general head with a reference from the task's own unlabelled rows: is its gain the states,
or the class prior?

Centring each criterion's states on the mean of its own rows lifts the leave-one-task-out probe
well above zero-shot; but the pool's rows are balanced (half true), so that mean also tells the
probe where the classes split. Here the reference is what a user could give instead: ``--ref``
unlabelled rows of the same criterion and wording, drawn with a share of true rows (``--yes``: a
number, or ``random`` for a share uniform in [0.1, 0.9] per criterion, seeded). The reference
takes the place of the content-free read of ``general_head`` (its mean log-odds and mean states),
so the same readouts and the same evaluation apply:

    cc           σ(a · zl + c · mean zl_ref + b): the zero-shot log-odds recentred on the rows
                 (batch calibration, Zhou et al. 2024), no states
    probe-cf/L   the probe on the states minus the reference's mean states, with zl and zl_ref

If the probe is no better than ``cc``, the reference's gain is the prior, not the states.

The pool's rows are balanced, which flatters any correction toward the middle. With ``--prior
natural`` the rows scored have the reference's share of true rows too (each criterion's rows
subsampled to it, the reference drawn from them at random), as when a user's reference and the
questions it calibrates come from one stream.

    python -m benchmarks.general_head_reference --features NPZ [--rows 64] [--ref 20] [--yes random]
        [--prior balanced|natural]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import general_head as gh
from benchmarks import harness
from benchmarks.fit_curves import FeatureCache

READOUTS = ("cc", "probe-cf/last", "probe-cf/18+last")


def with_share(read: dict[str, Any], share: float, rng: np.random.Generator) -> dict[str, Any]:
    """The read's rows subsampled so that a share ``share`` of them is true: every row of the
    class that share favours, as many of the other as the share asks (at least one)."""
    true, false = np.flatnonzero(read["y"] == 1), np.flatnonzero(read["y"] == 0)
    if share >= true.size / (true.size + false.size):
        false = rng.choice(false, max(1, min(false.size, round(true.size * (1 - share) / share))), replace=False)
    else:
        true = rng.choice(true, max(1, min(true.size, round(false.size * share / (1 - share)))), replace=False)
    keep = np.sort(np.concatenate([true, false]))
    return {**read, "y": read["y"][keep], "p_yes": read["p_yes"][keep],
            "states": {k: v[keep] for k, v in read["states"].items()}}


def with_reference(read: dict[str, Any], ref: int, yes: float | None, rng: np.random.Generator,
                   natural: bool = False) -> dict[str, Any]:
    """The read with ``cf`` replaced by the mean of ``ref`` of its rows, a share ``yes`` of them
    true (None: a share uniform in [0.1, 0.9]), broadcast to every row. ``natural``: the rows
    scored are first subsampled to that share (``with_share``) and the reference drawn from them
    at random, so its share is the rows' up to sampling."""
    share = rng.uniform(0.1, 0.9) if yes is None else yes
    if natural:
        read = with_share(read, share, rng)
        at = rng.choice(read["y"].size, min(ref, read["y"].size), replace=False)
    else:
        true, false = np.flatnonzero(read["y"] == 1), np.flatnonzero(read["y"] == 0)
        n_true = min(int(round(share * ref)), true.size)
        at = np.concatenate([rng.choice(true, n_true, replace=False),
                             rng.choice(false, min(ref - n_true, false.size), replace=False)])
    n = read["y"].size
    zl = gh._zl(read["p_yes"][at]).mean()
    cf = {"p_yes": np.full(n, 1 / (1 + np.exp(-zl))),
          "states": {k: np.broadcast_to(v[at].mean(0), v.shape) for k, v in read["states"].items()}}
    return {**read, "cf": cf}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--features", type=Path, required=True, help="general_head's features cache")
    p.add_argument("--rows", type=int, default=64, help="the rows general_head read per criterion and wording")
    p.add_argument("--ref", type=int, default=20, help="unlabelled rows in a criterion's reference")
    p.add_argument("--yes", default="random", help="share of true rows in the reference, or 'random'")
    p.add_argument("--prior", choices=("balanced", "natural"), default="balanced",
                   help="the rows scored: the pool's balanced rows, or subsampled to the reference's share")
    p.add_argument("--readouts", default=",".join(READOUTS))
    p.add_argument("--components", type=int, default=64)
    p.add_argument("--boot", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-key", default="qwen2.5-coder-1.5b", help="the model the features were read with")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    yes = None if args.yes == "random" else float(args.yes)
    natural = args.prior == "natural"
    reads = [with_reference(r, args.ref, yes, rng, natural)
             for r in gh.read_all(None, FeatureCache(args.features), args.rows // 2)]
    result = gh.evaluate(reads, args.readouts.split(","), args.components, args.boot)
    result["reference"] = {"rows": args.ref, "yes": args.yes, "prior": args.prior, "seed": args.seed}
    for name, doc in result["mean"].items():
        if name != "zero_shot":
            print(f"{name}: accuracy {doc['accuracy']}  Δ over tasks {doc['accuracy_minus_zero_shot_over_tasks']}  "
                  f"tasks +/- {doc['tasks_better_worse']}  nll {doc['nll']}  pooled ECE {doc['ece_pooled']}", flush=True)
    key = f"{args.model_key}-reference-{args.yes}" + ("-natural" if natural else "")
    out = harness.write_result("general_head", args.model_key, result, out=args.out or harness.result_path(
        "general_head", key), command=harness.command("benchmarks.general_head_reference"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
