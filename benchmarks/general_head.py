"""A general head, measured: one probe trained across many yes/no criteria answers a criterion
it never saw, against the verbalized zero-shot reading on the same rows.

Each dev set's labels are turned into yes/no criteria (``CRITERIA``, in general_head_criteria.py:
"Does this question ask for a place?" is true of trec's location rows; "Is the sentiment of this
text negative?" of the Hutto sets' negative levels), each in two wordings. A criterion's rows are the first ``--rows``/2
rows it is true of and the first ``--rows``/2 it is false of, as they come in the set; every row
is read once per wording as a noul question (the criterion is the row's own question text, after
what a set that asks per row puts before its question: the review, the question, the hypothesis),
and the features cache keeps the zero-shot P(yes), the last state and the mid-layer states at the
answer position.

Evaluation is leave-one-task-out: a task is a dev set, or the sets read from the same rows
(``TASK``: FreshQA's false premises and fact types); for each task, the probe is fitted on the
criteria of the *other* tasks only (no sister criterion or wording of the scored one is seen), then
scores every read of the held-out task. Readouts:

    zero-shot     the verbalized P(yes) (the engine's noul answer)
    platt         σ(a · zl + b), zl = log P(yes) − log P(no): the zero-shot reading recalibrated
                  across tasks (what a probe's gain must beat to be more than calibration)
    probe/L       σ(a · zl + w · x + b), x the top ``--components`` principal directions of the
                  standardized states L (14, 18, last, 18+last), fitted on the training tasks' rows;
                  C (inverse L2 strength) by an inner CV's log-loss, whole training tasks held out
    cc            σ(a · zl + c · zl_cf + b), zl_cf the log-odds of the same question about the
                  content-free state "N/A": contextual calibration, fitted across tasks
    probe-cf/L    σ(a · zl + c · zl_cf + w · x + b), x as above of the states L minus the same
                  question's content-free states (``--content-free``): a reference the server can
                  read once per question and keep, as it keeps contextual calibration's p_cf

Per held-out task: accuracy, NLL and ECE with their paired bootstrap intervals against zero-shot;
over tasks: the means (each resample the mean of the tasks' resamples: the rows' uncertainty, these
tasks fixed), the same differences with the *tasks* resampled (``…_over_tasks``: what a criterion
from outside the pool may expect), how many tasks gain and lose, and the pooled ECE.

    python -m benchmarks.general_head --model DIR [--rows 32] [--content-free] [--read-only]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.fit_curves import FeatureCache, interval, pooled_ece, scores, top1
from benchmarks.general_head_criteria import CRITERIA, Criterion, task_of
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset

READOUTS = ("platt", "probe/14", "probe/18", "probe/last", "probe/18+last")
CF_READOUTS = ("cc", "probe-cf/18", "probe-cf/last", "probe-cf/18+last")
CONTENT_FREE = "N/A"  # the content-free state of contextual calibration (calibration.py's default)
C_GRID = (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.1, 1.0)
INNER_FOLDS = 4  # the inner CV that picks C: the training tasks in 4 groups, whole tasks held out


def criterion_rows(name: str, crit: Criterion, per_side: int) -> tuple[list[str], list[str | None], np.ndarray]:
    """The first ``per_side`` rows the criterion is true of and false of (calibration split, then
    test where a set's calibration split is short), as they come: their states, what a set that
    asks per row puts before its question (the review, the question, the hypothesis; else None)
    and 0/1 truths."""
    states, own, truth, taken = [], [], [], {True: 0, False: 0}
    for split in ("calibration", "test"):
        ds = load_dataset(name, split)
        spec = ds.question
        for n, r in enumerate(ds.rows):
            t = spec.gold_index(r, n) in crit.yes
            if taken[t] < per_side:
                taken[t] += 1
                states.append(spec.state(r, n))
                mine = spec.instructions_for(r, n)   # a row's own question: what precedes the set's
                own.append(None if mine is None else mine.rsplit("\n", 1)[0])  # question ("Question: …")
                truth.append(int(t))
        if min(taken.values()) >= per_side:
            break
    return states, own, np.array(truth)


def read_all(decider: Decider | None, cache: FeatureCache, per_side: int, *,
             content_free: bool = False) -> list[dict[str, Any]]:
    """Every criterion's reads (each wording): set, criterion, truth, P(yes), states by layer; with
    ``content_free``, also ``cf``: the same P(yes) and states of each row's question asked about
    the content-free state ``CONTENT_FREE`` (one read per distinct question: one per wording, or
    one per row where the row brings its own question)."""
    reads = []
    for set_name, crits in CRITERIA.items():
        for crit in crits:
            states, own, truth = criterion_rows(set_name, crit, per_side)
            for w, wording in enumerate(crit.wordings):
                rows = [{"state": s, "instructions": wording if o is None else f"{o}\n{wording}"}
                        for s, o in zip(states, own)]
                question = {"type": "noul", "instructions": wording}
                h, p, m = cache.read(decider, f"{set_name}/{crit.name}/{w}", question, rows, layers=True)
                read = {"set": set_name, "task": task_of(set_name), "criterion": crit.name, "wording": w, "y": truth,
                        **_answer_and_states(h, p, m)}
                if content_free:
                    asked = {a: i for i, a in enumerate(dict.fromkeys(r["instructions"] for r in rows))}
                    h, p, m = cache.read(decider, f"{set_name}/{crit.name}/{w}/cf", question,
                                         [{"state": CONTENT_FREE, "instructions": a} for a in asked], layers=True)
                    at = np.array([asked[r["instructions"]] for r in rows])
                    read["cf"] = _answer_and_states(h[at], p[at], m[at])
                reads.append(read)
    return reads


def _answer_and_states(h: np.ndarray, p: np.ndarray, m: np.ndarray) -> dict[str, Any]:
    """A cached read as the evaluation takes it: P(yes) and the states by layer (``m``: 14, 18)."""
    return {"p_yes": p[:, 0], "states": {"last": h, 14: m[:, 0], 18: m[:, 1]}}


def _zl(p_yes: np.ndarray) -> np.ndarray:
    p = np.clip(p_yes, 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def _design(rows: list[dict[str, Any]], readout: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(z, h, y): z the zero-shot log-odds (n, 1), with the content-free ones beside them (n, 2)
    for a ``cf`` readout; h the states of its layers (minus the content-free states for a ``cf``
    readout), or None."""
    layers, cf = layers_of(readout), readout.startswith(("cc", "probe-cf"))
    z = np.concatenate([np.stack([_zl(r["p_yes"])] + ([_zl(r["cf"]["p_yes"])] if cf else []), 1) for r in rows])

    def states(r: dict[str, Any]) -> np.ndarray:
        return np.concatenate([r["states"][k] - (r["cf"]["states"][k] if cf else 0) for k in layers], axis=1)

    h = np.concatenate([states(r) for r in rows]) if layers else None
    return z, h, np.concatenate([r["y"] for r in rows])


class Probe:
    """σ(a·z + w·x + b), z the zero-shot log-odds (and the content-free ones, for a cf readout),
    x the standardized states' top principal directions (fitted on the training rows only, scaled
    by 1/√d), one logistic regression per strength C."""

    def __init__(self, z: np.ndarray, h: np.ndarray | None, components: int) -> None:
        if h is not None:
            self.mean, sd = h.mean(0), h.std(0)
            self.scale = np.maximum(sd, 1e-6 * sd.max())
            from sklearn.utils.extmath import randomized_svd

            _, _, vt = randomized_svd((h - self.mean) / self.scale, components, random_state=0)
            self.v = vt.T                                                       # (H, d)
        self.train_x = self.x(z, h)

    def x(self, z: np.ndarray, h: np.ndarray | None) -> np.ndarray:
        if h is None:
            return z
        return np.concatenate([z, ((h - self.mean) / self.scale) @ self.v / np.sqrt(self.v.shape[1])], 1)

    def fit(self, y: np.ndarray, c: float) -> Any:
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=c, max_iter=5000, tol=1e-8).fit(self.train_x, y)


def _log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.sum(y * np.log(p) + (1 - y) * np.log1p(-p)))


def fit_readout(train: list[dict[str, Any]], readout: str, components: int) -> tuple[Any, float]:
    """The readout fitted on ``train`` (a function of (z, h) → P(yes)); a probe's C by the
    log-loss of an inner CV over the training tasks (``INNER_FOLDS`` groups of whole tasks)."""
    if not layers_of(readout):
        z, _, y = _design(train, readout)
        return _predictor(Probe(z, None, components), y, 1e6), 1e6
    losses = np.zeros(len(C_GRID))
    tasks = sorted({r["task"] for r in train})
    fold = {t: i % INNER_FOLDS for i, t in enumerate(tasks)}   # whole tasks per fold
    for f in range(min(INNER_FOLDS, len(tasks))):
        z, h, y = _design([r for r in train if fold[r["task"]] != f], readout)
        inner = Probe(z, h, components)
        z_t, h_t, y_t = _design([r for r in train if fold[r["task"]] == f], readout)
        x_t = inner.x(z_t, h_t)
        for i, c in enumerate(C_GRID):
            losses[i] += _log_loss(inner.fit(y, c).predict_proba(x_t)[:, 1], y_t)
    c = C_GRID[int(np.argmin(losses))]
    z, h, y = _design(train, readout)
    return _predictor(Probe(z, h, components), y, c), c


def _predictor(probe: Probe, y: np.ndarray, c: float) -> Any:
    lr = probe.fit(y, c)
    return lambda z, h: lr.predict_proba(probe.x(z, h))[:, 1]


def layers_of(readout: str) -> list[Any]:
    """"probe/18+last" → [18, "last"]; "platt", "cc" → []."""
    return [] if "/" not in readout else [k if k == "last" else int(k) for k in readout.split("/")[1].split("+")]


def evaluate(reads: list[dict[str, Any]], readouts: list[str], components: int, boot: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    tasks = list(dict.fromkeys(r["task"] for r in reads))   # the held-out unit
    out: dict[str, Any] = {"tasks": {}, "mean": {}}
    per: dict[str, dict[str, Any]] = {r: {} for r in ("zero_shot", *readouts)}
    tops: dict[str, list[np.ndarray]] = {r: [] for r in per}
    idxs = []
    for held in tasks:
        test = [r for r in reads if r["task"] == held]
        train = [r for r in reads if r["task"] != held]
        y = np.concatenate([r["y"] for r in test])
        idx = rng.integers(0, y.size, size=(boot, y.size))
        idxs.append(idx)
        probs = {"zero_shot": np.concatenate([r["p_yes"] for r in test])}
        chosen = {}
        for readout in readouts:
            t0 = time.perf_counter()
            predict, c = fit_readout(train, readout, components)
            z, h, _ = _design(test, readout)
            probs[readout] = predict(z, h)
            chosen[readout] = {"C": c, "fit_seconds": round(time.perf_counter() - t0, 2)}
        cell: dict[str, Any] = {"reads": int(y.size), "criteria": len({r["criterion"] for r in test})}
        yes_no = {name: np.stack([p, 1 - p], axis=1) for name, p in probs.items()}
        cell.update(score_held_out(yes_no, 1 - y, idx, held, per, tops))   # class 0 is "yes"
        for readout in readouts:
            cell[readout].update(chosen[readout])
        out["tasks"][held] = cell
        print(f"  {held}: " + "  ".join(f"{n} {cell[n]['accuracy'][0]:.3f}/{cell[n]['nll'][0]:.3f}" for n in probs),
              flush=True)
    out["mean"] = over_tasks(per, tops, idxs, out["tasks"], rng, boot)
    return out


def score_held_out(probs: dict[str, np.ndarray], gold: np.ndarray, idx: np.ndarray, held: str,
                   per: dict[str, dict[str, Any]], tops: dict[str, list[np.ndarray]]) -> dict[str, Any]:
    """Each readout's accuracy, NLL and ECE on a held-out task's rows (``probs``: (n, C) by
    readout, ``zero_shot`` first; ``gold`` class indices; ``idx`` the bootstrap resamples), with
    the paired differences against zero-shot; the scores are kept in ``per``/``tops`` for
    ``over_tasks``."""
    cell: dict[str, Any] = {}
    for name, p in probs.items():
        s = per[name][held] = scores(p, gold, idx)
        tops[name].append(top1(p, gold))
        cell[name] = {m: interval(v) for m, v in s.items()}
        if name != "zero_shot":
            zero = per["zero_shot"][held]
            cell[name]["accuracy_minus_zero_shot"] = interval(s["accuracy"] - zero["accuracy"])
            cell[name]["nll_minus_zero_shot"] = interval(s["nll"] - zero["nll"])
    return cell


def over_tasks(per: dict[str, dict[str, Any]], tops: dict[str, list[np.ndarray]], idxs: list[np.ndarray],
               cells: dict[str, Any], rng: np.random.Generator, boot: int) -> dict[str, Any]:
    """Per readout over the held-out tasks (``cells``, as ``score_held_out`` scored them): the
    means (each resample the mean of the tasks' resamples: the rows' uncertainty, these tasks
    fixed), the differences with the *tasks* resampled (what a task from outside the pool may
    expect), the tasks worse beyond their interval, how many gain and lose, the pooled ECE."""
    tasks = list(cells)
    means = {name: {m: np.mean([per[name][s][m] for s in tasks], axis=0) for m in ("accuracy", "nll", "ece")}
             for name in per}
    zmean = means["zero_shot"]
    task_idx = rng.integers(0, len(tasks), size=(boot, len(tasks)))
    out = {}
    for name, mean in means.items():
        doc = {m: interval(v) for m, v in mean.items()}
        pooled, floor = pooled_ece(tops[name], idxs)
        doc["ece_pooled"], doc["ece_pooled_floor"] = interval(pooled), round(floor, 4)
        if name != "zero_shot":
            doc["accuracy_minus_zero_shot"] = interval(mean["accuracy"] - zmean["accuracy"])
            doc["nll_minus_zero_shot"] = interval(mean["nll"] - zmean["nll"])
            doc["worse_than_zero_shot"] = [s for s in tasks if cells[s][name]["accuracy_minus_zero_shot"][2] < 0]
            for m in ("accuracy", "nll"):
                d = np.array([per[name][t][m][-1] - per["zero_shot"][t][m][-1] for t in tasks])
                doc[f"{m}_minus_zero_shot_over_tasks"] = interval(np.append(d[task_idx].mean(1), d.mean()))
                if m == "accuracy":
                    doc["tasks_better_worse"] = [int(np.sum(d > 0)), int(np.sum(d < 0))]
        out[name] = doc
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rows", type=int, default=32, help="reads per criterion and wording (half true, half false)")
    p.add_argument("--read-only", action="store_true", help="read and cache the features, evaluate nothing")
    p.add_argument("--content-free", action="store_true",
                   help=f"also read each question about the content-free state {CONTENT_FREE!r}, and score the cf readouts")
    p.add_argument("--readouts", help="comma-separated (default: " + ",".join(READOUTS) + ", with --content-free also "
                   + ",".join(CF_READOUTS) + ")")
    p.add_argument("--components", type=int, default=64)
    p.add_argument("--boot", type=int, default=1000)
    harness.common_args(p, threads=None)
    args = p.parse_args()
    load_start = os.getloadavg()
    decider = Decider.load(args.model, threads=args.threads)
    out = args.out or harness.result_path("general_head", decider.model_key)
    cache = FeatureCache(out.with_suffix(".features.npz"))
    t0 = time.perf_counter()
    reads = read_all(decider, cache, args.rows // 2, content_free=args.content_free)
    print(f"{sum(r['y'].size for r in reads)} reads of {len(reads) // 2} criteria over {len(CRITERIA)} sets, "
          f"{len({task_of(s) for s in CRITERIA})} tasks ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.read_only:
        return 0
    readouts = args.readouts.split(",") if args.readouts else [*READOUTS, *(CF_READOUTS if args.content_free else ())]
    result = evaluate(reads, readouts, args.components, args.boot)
    result["criteria"] = {s: [c.name for c in cs] for s, cs in CRITERIA.items()}
    for name, doc in result["mean"].items():
        print(f"{name}: accuracy {doc['accuracy']}  nll {doc['nll']}  pooled ECE {doc['ece_pooled']}"
              + (f"  Δacc {doc['accuracy_minus_zero_shot']}  worse: {doc['worse_than_zero_shot']}"
                 if name != "zero_shot" else ""), flush=True)
    harness.write_result("general_head", decider.model_key, result, command=harness.command("benchmarks.general_head"),
                         out=out, load_avg_start=load_start)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
