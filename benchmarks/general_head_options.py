"""Choice and score from the general head: one yes/no criterion per option (or level), the noul
probe's log-odds softmaxed, against the verbalized answer on the same rows, leave-one-task-out.

A choice question (or a score question, its levels the options) becomes one noul criterion per
option, written from the question alone (its instructions, the option's name and description:
nothing hand-written per set, as a server would have to do it), in ``len(WORDINGS)`` wordings::

    What kind of answer does this question ask for?
    Is the answer “location” (asks for a place: city, country, mountain, state, other location)?

Each row is read once as the set's own question (the verbalized zero-shot answer) and once per
option and wording as that noul question (its P(yes) and states, as ``general_head`` reads them).
For each set, the noul probe of ``general_head`` is fitted on the criteria of every *other*
task of its pool (the set's own criteria never seen), and an option's logit is its probe log-odds
averaged over the wordings; softmax over the options gives the answer. Readouts:

    zero-shot   the verbalized choice or score (the engine's probabilities; argmax for accuracy)
    noul-zs     softmax of the verbalized noul log-odds per option: what the split into criteria
                costs or gains before any probe
    probe/L     softmax of the probe's log-odds per option (``general_head``'s probe/L)

Rows: the first ``--rows``/K rows of each class (calibration split, then test), so accuracy is a
balanced accuracy (for a score, of the most probable level). Per set: accuracy, NLL and ECE
with paired bootstrap intervals against zero-shot; per question type, over its sets (each its own
task): the means, the differences with the tasks resampled, and the pooled ECE.

    python -m benchmarks.general_head_options --model DIR --pool-features NPZ [--types choice,score] [--rows 64] [--wordings 2]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import general_head as gh
from benchmarks import harness
from benchmarks.fit_curves import FeatureCache
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset
from typed_decisions.evaluation.fit_cli import head_rows

SETS = {"choice": ("trec", "news-section", "news-sentence-bias", "debates-2016", "corr2cause"),
        "score": ("hutto-amazon", "hutto-tweets", "hutto-movies", "hutto-nyt", "crepe-likelihood", "freshqa-fact-type")}
WORDINGS = ("{instructions}\nIs the answer “{name}”{described}?",
            "Consider this question: {instructions}\nWould “{name}”{described} be a correct answer to it?")
READOUTS = ("probe/last", "probe/18+last")


def option_criteria(spec: Any, wording: str) -> list[str]:
    """Each option of a choice question as a yes/no question, in one wording."""
    return [wording.format(instructions=spec.instructions, name=o.name,
                           described=f" ({o.description})" if o.description else "") for o in spec.options]


def balanced_rows(name: str, per_class: int) -> tuple[Any, list[dict[str, Any]], np.ndarray]:
    """(spec, raw rows, gold): the first ``per_class`` rows of each class, calibration then test."""
    rows, gold, taken = [], [], {}
    for split in ("calibration", "test"):
        ds = load_dataset(name, split)
        spec = ds.question
        for n, r in enumerate(ds.rows):
            g = spec.gold_index(r, n)
            if taken.get(g, 0) < per_class:
                taken[g] = taken.get(g, 0) + 1
                rows.append(r)
                gold.append(g)
        if len(taken) == len(spec.options) and min(taken.values()) >= per_class:
            break
    return spec, rows, np.array(gold)


def read_set(decider: Decider | None, cache: FeatureCache, name: str, per_class: int,
             wordings: int = len(WORDINGS)) -> dict[str, Any]:
    """A set's reads: gold, the verbalized choice probabilities, and for the first ``wordings``
    wordings each option's noul read (P(yes), states by layer)."""
    spec, raw, gold = balanced_rows(name, per_class)
    rows = head_rows(spec, raw)
    _, verbalized = cache.read(decider, f"{name}/verbalized", spec.question(), rows)
    own = [r.get("instructions") for r in rows]   # a row's own question (corr2cause's hypothesis)
    own = [None if o is None else o.rsplit("\n", 1)[0] for o in own]
    reads = []
    for w, wording in enumerate(WORDINGS[:wordings]):
        criteria = option_criteria(spec, wording)
        k = len(criteria)
        noul = [{"state": r["state"], "instructions": c if o is None else f"{o}\n{c}"}
                for r, o in zip(rows, own) for c in criteria]   # row-major: a row's options share its state's prefill
        h, p, m = cache.read(decider, f"{name}/options/{w}", {"type": "noul", "instructions": criteria[0]}, noul,
                             layers=True)
        read = gh._answer_and_states(h, p, m)
        reads.append([{"p_yes": read["p_yes"][j::k], "states": {l: v[j::k] for l, v in read["states"].items()}}
                      for j in range(k)])
    return {"set": name, "task": gh.task_of(name), "gold": gold, "verbalized": verbalized, "options": reads}


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def option_logits(read: dict[str, Any], readout: str, predict: Any = None) -> np.ndarray:
    """(n, K): each option's log-odds, the mean over wordings, by the verbalized noul P(yes)
    (``noul-zs``) or the probe."""
    per_wording = []
    for options in read["options"]:
        cols = []
        for o in options:
            if readout == "noul-zs":
                cols.append(gh._zl(o["p_yes"]))
            else:
                rows = [{"p_yes": o["p_yes"], "states": o["states"], "y": np.zeros(o["p_yes"].size)}]
                z, h, _ = gh._design(rows, readout)
                cols.append(gh._zl(predict(z, h)))
        per_wording.append(np.stack(cols, 1))
    return np.mean(per_wording, 0)


def evaluate(sets: list[dict[str, Any]], pool: list[dict[str, Any]], readouts: list[str], components: int,
             boot: int) -> dict[str, Any]:
    """Each set held out in turn (the probe fitted on the pool's other tasks), scored as
    ``general_head`` scores a task: per set, and over the sets (``general_head.over_tasks``)."""
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"tasks": {}}
    per: dict[str, dict[str, Any]] = {r: {} for r in ("zero_shot", "noul-zs", *readouts)}
    tops: dict[str, list[np.ndarray]] = {r: [] for r in per}
    idxs = []
    for s in sets:
        gold = s["gold"]
        idx = rng.integers(0, gold.size, size=(boot, gold.size))
        idxs.append(idx)
        probs = {"zero_shot": s["verbalized"], "noul-zs": _softmax(option_logits(s, "noul-zs"))}
        chosen = {}
        train = [r for r in pool if r["task"] != s["task"]]   # the held-out task's criteria never seen
        for readout in readouts:
            t0 = time.perf_counter()
            predict, c = gh.fit_readout(train, readout, components)
            probs[readout] = _softmax(option_logits(s, readout, predict))
            chosen[readout] = {"C": c, "fit_seconds": round(time.perf_counter() - t0, 2)}
        cell: dict[str, Any] = {"rows": int(gold.size), "options": int(s["verbalized"].shape[1])}
        cell.update(gh.score_held_out(probs, gold, idx, s["task"], per, tops))
        for readout in readouts:
            cell[readout].update(chosen[readout])
        out["tasks"][s["task"]] = cell
        print(f"  {s['set']}: " + "  ".join(f"{n} {cell[n]['accuracy'][0]:.3f}/{cell[n]['nll'][0]:.3f}"
                                            for n in probs), flush=True)
    out["mean"] = gh.over_tasks(per, tops, idxs, out["tasks"], rng, boot)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--pool-features", type=Path, required=True,
                   help="general_head's features cache (its noul criteria: the probe's training pool)")
    p.add_argument("--types", default="choice,score", help="the question types to read and score (SETS' keys)")
    p.add_argument("--rows", type=int, default=64, help="rows per set, balanced over its classes")
    p.add_argument("--read-only", action="store_true", help="read and cache the features, evaluate nothing")
    p.add_argument("--wordings", type=int, default=len(WORDINGS), help="read and score the first N wordings")
    p.add_argument("--readouts", default=",".join(READOUTS))
    p.add_argument("--components", type=int, default=64)
    p.add_argument("--boot", type=int, default=1000)
    harness.common_args(p, threads=None)
    args = p.parse_args()
    load_start = os.getloadavg()
    decider = Decider.load(args.model, threads=args.threads)
    types = args.types.split(",")
    out = args.out or harness.result_path("general_head", f"{decider.model_key}-{'+'.join(types)}")
    cache = FeatureCache(out.with_suffix(".features.npz"))
    t0 = time.perf_counter()
    by_type: dict[str, list[dict[str, Any]]] = {}
    for kind in types:
        for name in SETS[kind]:
            k = len(load_dataset(name, "calibration").question.options)
            by_type.setdefault(kind, []).append(read_set(decider, cache, name, math.ceil(args.rows / k), args.wordings))
    print(f"{sum(s['gold'].size for sets in by_type.values() for s in sets)} rows of "
          f"{sum(map(len, by_type.values()))} sets read ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.read_only:
        return 0
    pool = gh.read_all(None, FeatureCache(args.pool_features), 32)
    result: dict[str, Any] = {"wordings": list(WORDINGS[:args.wordings])}
    for kind, sets in by_type.items():
        print(f"{kind}:", flush=True)
        result[kind] = evaluate(sets, pool, args.readouts.split(","), args.components, args.boot)
        for name, doc in result[kind]["mean"].items():
            print(f"  {name}: accuracy {doc['accuracy']}  nll {doc['nll']}  pooled ECE {doc['ece_pooled']}"
                  + (f"  Δacc tasks resampled {doc['accuracy_minus_zero_shot_over_tasks']}" if name != "zero_shot" else ""),
                  flush=True)
    harness.write_result("general_head", decider.model_key, result, out=out, load_avg_start=load_start,
                         command=harness.command("benchmarks.general_head_options"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
