"""A general head, measured: one probe trained across many yes/no criteria answers a criterion
it never saw, against the verbalized zero-shot reading on the same rows.

Each dev set's labels are turned into yes/no criteria (``CRITERIA``: "Does this question ask for
a place?" is true of trec's location rows; "Is the sentiment of this text negative?" of the
Hutto sets' negative levels), each in two wordings. A criterion's rows are the first ``--rows``/2
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.fit_curves import FeatureCache, interval, pooled_ece, scores, top1
from typed_decisions.decider import Decider
from typed_decisions.evaluation.datasets import load_dataset


@dataclass(frozen=True)
class Criterion:
    """A yes/no criterion over a dev set's rows: true of the rows whose gold class is in ``yes``."""

    name: str
    wordings: tuple[str, str]
    yes: frozenset[int]


def _c(name: str, a: str, b: str, *yes: int) -> Criterion:
    return Criterion(name, (a, b), frozenset(yes))


_NEG, _POS = "negative", "positive"
_SENTIMENT5 = [
    _c(_NEG, "Is the sentiment of this text negative?", "Does this text express a negative opinion or feeling?", 0, 1),
    _c(_POS, "Is the sentiment of this text positive?", "Does this text express a positive opinion or feeling?", 3, 4),
]
CRITERIA: dict[str, list[Criterion]] = {
    "trec": [
        _c("abbreviation", "Does this question ask what an abbreviation stands for?",
           "Is this a question about the meaning or expansion of an abbreviation?", 0),
        _c("description", "Does this question ask for a definition, description or explanation?",
           "Is this question answered by describing or explaining something?", 1),
        _c("entity", "Does this question ask for a thing, such as an animal, colour, film or product?",
           "Is the answer to this question an object or other entity (not a person, place or number)?", 2),
        _c("human", "Does this question ask for a person or a group of people?",
           "Is the answer to this question a person, a group or an organisation?", 3),
        _c("location", "Does this question ask for a place?",
           "Is the answer to this question a location, such as a city, country or mountain?", 4),
        _c("number", "Does this question ask for a number, a date or an amount?",
           "Is the answer to this question numeric, such as a count, date, distance or price?", 5),
    ],
    "sms-spam": [_c("spam", "Is this SMS message spam?",
                    "Is this text message unsolicited advertising, a prize offer or a scam?", 0)],
    "hutto-nyt": [
        _c(_NEG, *_SENTIMENT5[0].wordings, 0), _c(_POS, *_SENTIMENT5[1].wordings, 2),
        _c("neutral", "Is this text neutral, neither positive nor negative?",
           "Does this text express no clear opinion or feeling either way?", 1),
    ],
    "hutto-amazon": _SENTIMENT5, "hutto-tweets": _SENTIMENT5, "hutto-movies": _SENTIMENT5,
    "rotten-tomatoes": [_c("liked", "Did the critic like this film?", "Is this movie review favourable?", 0)],
    "debates-2016": [
        _c("democrat", "Was this said by a Democratic candidate (Hillary Clinton or Tim Kaine)?",
           "Is the speaker of this debate excerpt a Democrat?", 0, 2),
        _c("trump", "Was this said by Donald Trump?", "Is Donald Trump the speaker of this debate excerpt?", 1),
    ],
    "plot-review": [_c("same-film", "Is this review about the film whose plot is summarised above?",
                       "Do the plot summary and the review describe the same film?", 0)],
    "convention-speeches": [_c("democratic", "Was this speech given at the 2012 Democratic National Convention?",
                               "Is this a speech by a Democrat at their party's 2012 convention?", 0)],
    "sarcasm-headlines": [_c("sarcastic", "Is this headline sarcastic or satirical?",
                             "Is this a joke headline, like those of The Onion, rather than real news?", 0)],
    "unsolvable-questions": [_c("answerable", "Can this question be answered from the passage alone?",
                                "Does the passage contain the answer to this question?", 0)],
    "corr2cause": [
        _c("entailed", "Do the statistical relations in the premise imply this hypothesis?",
           "Is this hypothesis entailed by the stated relations among the variables?", 0),
        _c("contradicted", "Do the statistical relations in the premise rule out this hypothesis?",
           "Is this hypothesis contradicted by the stated relations among the variables?", 1),
    ],
    "product-matching": [_c("same-product", "Do these two product titles describe the same product?",
                            "Are Product 1 and Product 2 the same real-world item?", 0)],
    "autos-vs-electronics": [_c("cars", "Is this post about cars?",
                                "Was this post written for a newsgroup about cars and driving?", 0)],
    "commons-party": [_c("conservative", "Was this speech made by a Conservative MP?",
                         "Does the MP who made this speech belong to the Conservative Party?", 0)],
    "freshqa-false-premise": [_c("false-premise", "Does this question rest on a false premise?",
                                 "Does this question take for granted something that is not true?", 0)],
    "freshqa-fact-type": [
        _c("never-changing", "Is the true answer to this question fixed, never changing over time?",
           "Will the answer to this question stay the same no matter when it is asked?", 0),
        _c("fast-changing", "Does the true answer to this question usually change within a year?",
           "Would the answer to this question likely be different if it were asked again next year?", 2),
    ],
    "crepe-likelihood": [
        _c("more-likely", "Does this step make the event more likely?",
           "Will doing this step raise the chance that the event happens?", 2),
        _c("less-likely", "Does this step make the event less likely?",
           "Will doing this step lower the chance that the event happens?", 0),
    ],
    "news-section": [
        _c("politics", "Was this article published in the politics section of a news site?",
           "Is this a politics news article?", 0),
        _c("business", "Was this article published in the business or economy section of a news site?",
           "Is this a business news article?", 3),
    ],
    "news-sentence-bias": [
        _c("quote", "Is this sentence a quotation of what someone said?",
           "Does this sentence report someone's own words as a quote?", 2),
        _c("speculation", "Does this sentence speculate about something that is not known for certain?",
           "Is this sentence a guess rather than an established fact?", 4),
    ],
}
# pararule-deduction is left out: its truth is read off a "not" in the statement (every negated
# statement false), a shortcut a probe trained on it would carry to other criteria.
# Sets read from the same rows are one task for leave-one-task-out: held out together, so a probe
# never scores rows it was trained on under a sister criterion.
TASK = {"freshqa-false-premise": "freshqa", "freshqa-fact-type": "freshqa"}
READOUTS = ("platt", "probe/14", "probe/18", "probe/last", "probe/18+last")
CF_READOUTS = ("cc", "probe-cf/18", "probe-cf/last", "probe-cf/18+last")
CONTENT_FREE = "N/A"  # the content-free state of contextual calibration (calibration.py's default)
C_GRID = (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.1, 1.0)
INNER_FOLDS = 4  # the inner CV that picks C: the training tasks in 4 groups, whole tasks held out


def task_of(set_name: str) -> str:
    return TASK.get(set_name, set_name)


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
