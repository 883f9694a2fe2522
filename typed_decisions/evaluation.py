"""Evaluation on labelled data: ask one question of every row, compare with the gold label.

Input: rows (dicts; a JSONL file or a named dataset from ``datasets.py``) and a ``QuestionSpec``
(type, instructions, options with descriptions, which row fields hold the state and the gold
label). Output: a JSON-able report with

    accuracy, macro-F1, NLL, Brier, ECE        the formulas of calibration.py (docs/METHOD.md §5)
    reliability                                per confidence bin: count, accuracy, mean confidence
    risk_coverage                              for thresholds t: coverage = share of rows with max p >= t,
                                               accuracy on those rows (what acting only above t gives)
    permutation (choice only)                  option-order flip rate and total variation (permutation.py)
    calibrated                                 the same metrics after a calibration file, when given

Confidence here is the top option probability max_i p_i (ECE, reliability, risk-coverage), not
the answer's reported confidence formula; they rank rows identically for typesafe confidence.

``calibration_fit`` fits per-type calibration on one split and reports every variant on another
(``typed-decisions calibrate``). ``main_eval`` / ``main_calibrate`` are the CLI subcommands.
The engine is reached only through ``Decider.probabilities``; this module imports no onnxruntime
itself, and matplotlib only inside ``plot_reliability``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .calibration import (CalibrationFile, TypeCalibration, accuracy, brier, calibrate, ece, fit_temperature,
                          macro_f1, nll)
from .compiler import resolve_label_mode
from .errors import InvalidRequestError, TypedDecisionsError
from .permutation import permutation_report

if TYPE_CHECKING:
    from .decider import Decider

__all__ = ["OptionSpec", "QuestionSpec", "metrics", "reliability_bins", "risk_coverage", "evaluate",
           "collect_probabilities", "calibration_fit", "plot_reliability", "read_jsonl", "main_eval",
           "main_calibrate", "THRESHOLDS"]

THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
MATPLOTLIB_HINT = "the reliability plot needs matplotlib: pip install matplotlib  (or the [eval] extra)"


# ---------------------------------------------------------------- the question spec


class OptionSpec(BaseModel):
    """One option: its name (what the model reads out / the gold label) and a description."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str | None = None


class QuestionSpec(BaseModel):
    """A question to ask of every row, and how a row maps to state and gold label.

    {"name": "spam", "type": "noul", "instructions": "Is this SMS message spam?",
     "options": [{"name": "yes", "description": "..."}, {"name": "no"}],
     "state_field": "text", "gold_field": "label", "gold_map": {"spam": "yes", "ham": "no"}}

    noul options must be named yes, no (in that order); score options are the levels, lowest
    first, and a gold label may be a level name or its index.
    """

    model_config = ConfigDict(extra="forbid")
    name: str = "question"
    type: Literal["noul", "choice", "score"]
    instructions: str | None = None
    options: list[OptionSpec] = Field(min_length=2)
    state_field: str = "state"
    gold_field: str = "gold"
    gold_map: dict[str, str] = Field(default_factory=dict, description="raw gold value → option name")

    @model_validator(mode="after")
    def _check(self) -> QuestionSpec:
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"options: duplicate option names in {names}")
        if self.type == "noul" and names != ["yes", "no"]:
            raise ValueError(f"options: a noul question has the options yes, no (in that order), got {names}")
        bad = sorted(set(self.gold_map.values()) - set(names))
        if bad:
            raise ValueError(f"gold_map: maps to {bad}, which are not options ({names})")
        return self

    @property
    def option_names(self) -> list[str]:
        return [o.name for o in self.options]

    def question(self, order: Sequence[int] | None = None) -> dict[str, Any]:
        """The wire-format question; ``order`` shows the options permuted (choice only).

        >>> QuestionSpec(type="score", options=[{"name": "low"}, {"name": "high", "description": "urgent"}]).question()
        {'type': 'score', 'criteria': ['low', 'high: urgent']}
        """
        q: dict[str, Any] = {"type": self.type}
        if self.instructions is not None:
            q["instructions"] = self.instructions
        opts = self.options if order is None else [self.options[i] for i in order]
        if self.type == "choice":
            q["criteria"] = {o.name: o.description for o in opts}
        elif self.type == "score":
            q["criteria"] = [f"{o.name}: {o.description}" if o.description else o.name for o in opts]
        else:
            yes, no = self.options
            if yes.description is not None or no.description is not None:
                q["criteria"] = {"true": yes.description, "false": no.description}
        return q

    def state(self, row: Mapping[str, Any], n: int = 0) -> str:
        if self.state_field not in row:
            raise InvalidRequestError(f"row {n} has no state field {self.state_field!r} (set state_field in the spec)")
        return str(row[self.state_field])

    def gold_index(self, row: Mapping[str, Any], n: int = 0) -> int:
        """Index of the row's gold option (via gold_map; score levels also by index)."""
        if self.gold_field not in row:
            raise InvalidRequestError(f"row {n} has no gold field {self.gold_field!r} (set gold_field in the spec)")
        raw = row[self.gold_field]
        if isinstance(raw, bool):
            raw = "yes" if raw else "no"
        key = self.gold_map.get(str(raw), str(raw))
        names = self.option_names
        if key in names:
            return names.index(key)
        if self.type == "score" and isinstance(raw, int) and 0 <= raw < len(names):
            return raw
        raise InvalidRequestError(f"row {n}: gold label {raw!r} is not an option ({names}); add it to gold_map")


# ---------------------------------------------------------------- metrics


def reliability_bins(probs: Sequence[np.ndarray], gold: Sequence[int], n_bins: int = 10) -> list[dict[str, Any]]:
    """Per equal-width confidence bin (b/B, (b+1)/B]: count, accuracy, mean confidence (None if empty).

    >>> [b["count"] for b in reliability_bins([[0.9, 0.1], [0.55, 0.45]], [0, 1], n_bins=2)]
    [0, 2]
    """
    conf = np.array([float(np.max(p)) for p in probs])  # (N,)
    hit = np.array([float(np.argmax(p) == y) for p, y in zip(probs, gold)])  # (N,)
    b = np.clip(np.ceil(conf * n_bins).astype(np.int64) - 1, 0, n_bins - 1)  # (N,) same bins as calibration.ece
    out = []
    for k in range(n_bins):
        m = b == k
        out.append({"lo": k / n_bins, "hi": (k + 1) / n_bins, "count": int(m.sum()),
                    "accuracy": float(hit[m].mean()) if m.any() else None,
                    "confidence": float(conf[m].mean()) if m.any() else None})
    return out


def risk_coverage(probs: Sequence[np.ndarray], gold: Sequence[int],
                  thresholds: Sequence[float] = THRESHOLDS) -> list[dict[str, Any]]:
    """For each t: coverage = share of rows with max p >= t, accuracy on them (None if none).

    >>> risk_coverage([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]], [0, 1, 1], [0.0, 0.65, 0.95])
    [{'threshold': 0.0, 'n': 3, 'coverage': 1.0, 'accuracy': 0.6666666666666666}, {'threshold': 0.65, 'n': 2, 'coverage': 0.6666666666666666, 'accuracy': 1.0}, {'threshold': 0.95, 'n': 0, 'coverage': 0.0, 'accuracy': None}]
    """
    conf = np.array([float(np.max(p)) for p in probs])  # (N,)
    hit = np.array([float(np.argmax(p) == y) for p, y in zip(probs, gold)])  # (N,)
    out = []
    for t in thresholds:
        m = conf >= t
        out.append({"threshold": float(t), "n": int(m.sum()), "coverage": float(m.mean()),
                    "accuracy": float(hit[m].mean()) if m.any() else None})
    return out


def metrics(probs: Sequence[np.ndarray], gold: Sequence[int], *, n_bins: int = 10, qtype: str = "choice",
            thresholds: Sequence[float] = THRESHOLDS) -> dict[str, Any]:
    """All metrics of one set of probabilities (formulas: calibration.py). Score questions also get
    ``mae``, the mean |expected level − gold level|."""
    pred = [int(np.argmax(p)) for p in probs]
    k = len(probs[0])
    confusion = np.zeros((k, k), dtype=np.int64)  # (gold, predicted)
    for y, p in zip(gold, pred):
        confusion[y, p] += 1
    out: dict[str, Any] = {
        "n": len(probs), "accuracy": accuracy(probs, gold), "macro_f1": macro_f1(pred, gold),
        "nll": nll(probs, gold), "brier": brier(probs, gold), "ece": ece(probs, gold, n_bins),
        "ece_bins": n_bins, "mean_confidence": float(np.mean([np.max(p) for p in probs])),
    }
    if qtype == "score":
        levels = np.arange(k)
        out["mae"] = float(np.mean([abs(float(levels @ p) - y) for p, y in zip(probs, gold)]))
    out["confusion"] = confusion.tolist()
    out["reliability"] = reliability_bins(probs, gold, n_bins)
    out["risk_coverage"] = risk_coverage(probs, gold, thresholds)
    return out


# ---------------------------------------------------------------- asking the model


def _request(decider: Decider, spec: QuestionSpec, state: str, order: Sequence[int] | None = None) -> dict[str, Any]:
    return {"model": decider.name, "state": state, "questions": {spec.name: spec.question(order)}}


def collect_probabilities(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
                          label_mode: str | None = None, progress: bool = True,
                          desc: str = "eval") -> tuple[list[np.ndarray], list[int]]:
    """Uncalibrated option probabilities (option order of the spec) and gold indices, one per row."""
    from tqdm.auto import tqdm

    gold = [spec.gold_index(r, n) for n, r in enumerate(rows)]  # fail on a bad label before any compute
    probs = []
    for n, r in enumerate(tqdm(rows, desc=desc, unit="row", disable=not progress)):
        p = decider.probabilities(_request(decider, spec, spec.state(r, n)), label_mode=label_mode)
        probs.append(p[spec.name])
    return probs, gold


def content_free_probabilities(decider: Decider, spec: QuestionSpec, state: str = "N/A", *,
                               label_mode: str | None = None) -> np.ndarray:
    """p_cf: the question's probabilities for a content-free state (contextual calibration)."""
    return decider.probabilities(_request(decider, spec, state), label_mode=label_mode)[spec.name]


def _apply(probs: Sequence[np.ndarray], tc: TypeCalibration, cf: np.ndarray | None) -> list[np.ndarray]:
    return [calibrate(p, tc.temperature, cf if tc.contextual else None) for p in probs]


def _permutations(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], k: int, *,
                  label_mode: str | None, progress: bool) -> dict[str, Any]:
    """Mean flip rate and TV over rows, each row re-asked under k option orders (choice only)."""
    from tqdm.auto import tqdm

    if spec.type != "choice":
        return {"skipped": f"{spec.type} options have a fixed order (yes/no, levels lowest first)"}
    flips, mean_tv, max_tv = [], [], []
    for n, r in enumerate(tqdm(rows, desc="permutations", unit="row", disable=not progress)):
        state = spec.state(r, n)

        def probs_for(order: list[int]) -> np.ndarray:
            return decider.probabilities(_request(decider, spec, state, order), label_mode=label_mode)[spec.name]

        rep = permutation_report(probs_for, list(range(len(spec.options))), k=k, seed=n)
        flips.append(rep.flip_rate)
        mean_tv.append(rep.mean_tv)
        max_tv.append(rep.max_tv)
    return {"k": k, "rows": len(rows), "flip_rate": float(np.mean(flips)), "mean_tv": float(np.mean(mean_tv)),
            "max_tv": float(np.max(max_tv)), "seed": "row index"}


def evaluate(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
             label_mode: str | None = None, calibration: CalibrationFile | None = None,
             permutations: int = 0, n_bins: int = 10, thresholds: Sequence[float] = THRESHOLDS,
             progress: bool = True, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ask ``spec`` of every row; the report (module docstring). ``meta`` is copied into it."""
    if not rows:
        raise TypedDecisionsError("no rows to evaluate (empty dataset or split, or --limit 0)")
    mode = label_mode or decider.label_mode
    t0 = time.perf_counter()
    probs, gold = collect_probabilities(decider, spec, rows, label_mode=mode, progress=progress)
    seconds = time.perf_counter() - t0
    report: dict[str, Any] = {
        "model": decider.name, **(meta or {}), "question": spec.model_dump(), "label_mode": mode,
        "labels": resolve_label_mode(spec.type, mode),  # what this question type was compiled with
        "n": len(rows), "seconds": round(seconds, 3), "rows_per_second": round(len(rows) / seconds, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "class_counts": {o: int(sum(1 for y in gold if y == i)) for i, o in enumerate(spec.option_names)},
        "metrics": metrics(probs, gold, n_bins=n_bins, qtype=spec.type, thresholds=thresholds),
    }
    if calibration is not None:
        tc = calibration.for_type(spec.type)
        cf = (content_free_probabilities(decider, spec, calibration.content_free_state or "", label_mode=mode)
              if tc.contextual else None)
        report["calibration"] = {"model": calibration.model, "version": calibration.version,
                                 "temperature": tc.temperature, "contextual": tc.contextual,
                                 "content_free_state": calibration.content_free_state if tc.contextual else None,
                                 "content_free_probabilities": cf.tolist() if cf is not None else None}
        report["calibrated"] = metrics(_apply(probs, tc, cf), gold, n_bins=n_bins, qtype=spec.type,
                                       thresholds=thresholds)
    if permutations > 0:
        report["permutation"] = _permutations(decider, spec, rows, permutations, label_mode=mode, progress=progress)
    report["items"] = [{"gold": int(y), "probabilities": [round(float(x), 6) for x in p]}
                       for p, y in zip(probs, gold)]
    return report


# ---------------------------------------------------------------- calibration fitting


def calibration_fit(fit_probs: Sequence[np.ndarray], fit_gold: Sequence[int], test_probs: Sequence[np.ndarray],
                    test_gold: Sequence[int], content_free: np.ndarray, *, qtype: str = "choice",
                    n_bins: int = 10) -> dict[str, Any]:
    """Fit temperature (T), contextual (p / p_cf) and combined (p / p_cf, then T) on the fit split;
    report all four variants (with "none") on both splits. ``best`` minimises NLL on the FIT split
    among the variants that do not lower the FIT split's accuracy (temperature never changes the
    argmax; dividing by p_cf can), so the test split stays untouched by the choice and a
    calibration is never chosen for trading accuracy for likelihood."""
    cf = np.asarray(content_free, dtype=np.float64)
    t_plain = fit_temperature(fit_probs, fit_gold)
    ctx_fit = [calibrate(p, 1.0, cf) for p in fit_probs]
    t_comb = fit_temperature(ctx_fit, fit_gold)
    variants = {"none": TypeCalibration(), "temperature": TypeCalibration(temperature=t_plain),
                "contextual": TypeCalibration(contextual=True),
                "combined": TypeCalibration(temperature=t_comb, contextual=True)}
    out: dict[str, Any] = {"content_free_probabilities": cf.tolist(), "variants": {}}
    for name, tc in variants.items():
        out["variants"][name] = {
            "temperature": tc.temperature, "contextual": tc.contextual,
            "fit": {k: v for k, v in metrics(_apply(fit_probs, tc, cf), fit_gold, n_bins=n_bins, qtype=qtype).items()
                    if k in ("n", "accuracy", "macro_f1", "nll", "brier", "ece")},
            "test": {k: v for k, v in metrics(_apply(test_probs, tc, cf), test_gold, n_bins=n_bins, qtype=qtype).items()
                     if k in ("n", "accuracy", "macro_f1", "nll", "brier", "ece")},
        }
    floor = out["variants"]["none"]["fit"]["accuracy"]
    eligible = [v for v in variants if out["variants"][v]["fit"]["accuracy"] >= floor - 1e-12]
    out["best"] = min(eligible, key=lambda v: out["variants"][v]["fit"]["nll"])
    return out


# ---------------------------------------------------------------- plot


def plot_reliability(report: Mapping[str, Any], path: str | Path) -> Path:
    """Reliability diagram (accuracy vs confidence per bin, plus the diagonal) as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(MATPLOTLIB_HINT) from e
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=1, label="perfect calibration")
    for key, colour in (("metrics", "C0"), ("calibrated", "C1")):
        if key not in report:
            continue
        bins = [b for b in report[key]["reliability"] if b["count"]]
        label = f"{'raw' if key == 'metrics' else 'calibrated'} (ECE {report[key]['ece']:.3f})"
        ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o-", c=colour, label=label)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (max p)", ylabel="accuracy",
           title=f"{report.get('dataset') or report.get('data', '')} · {report.get('model', '')} · n={report.get('n')}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


# ---------------------------------------------------------------- CLI


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise InvalidRequestError(f"{path} line {n} is not JSON: {e}") from None
    return rows


def _load_spec(path: str | Path) -> QuestionSpec:
    try:
        return QuestionSpec.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except ValueError as e:
        raise InvalidRequestError(f"question spec {path}: {e}") from None


def _source(args: argparse.Namespace, split: str, limit: int | None
            ) -> tuple[QuestionSpec, list[dict[str, Any]], dict[str, Any]]:
    """(question spec, rows of the split, report metadata) from --dataset / --data + --spec / --preset."""
    from .datasets import get_spec, load_dataset, rows_for

    meta: dict[str, Any] = {"split": split, "limit": limit}
    spec: QuestionSpec | None = None
    if getattr(args, "preset", None):
        from .presets import load_preset

        preset = load_preset(args.preset)
        spec = preset.question_spec()
        meta["preset"] = {"name": preset.name, "version": preset.version}
    if args.dataset:
        ds = load_dataset(args.dataset, split, limit, progress=not args.quiet)  # type: ignore[arg-type]
        meta["dataset"] = args.dataset
        meta["source"] = get_spec(args.dataset).source
        return spec or ds.question, ds.rows, meta
    if not args.data:
        raise InvalidRequestError("give --dataset NAME, or --data FILE.jsonl with --spec SPEC.json (or --preset NAME)")
    if spec is None:
        if not args.spec:
            raise InvalidRequestError("--data needs --spec SPEC.json (the question and the row fields) or --preset NAME")
        spec = _load_spec(args.spec)
    raw = read_jsonl(args.data)
    # rows_for dedupes and splits on the "state" key: give each row one, salted by the file's stem.
    keyed = [{**r, "state": spec.state(r, n), "gold": r.get(spec.gold_field)} for n, r in enumerate(raw)]
    rows = rows_for(Path(args.data).stem, keyed, split, limit)  # type: ignore[arg-type]
    meta["data"] = str(args.data)
    if spec.state_field != "state" or spec.gold_field != "gold":
        spec = spec.model_copy(update={"state_field": "state", "gold_field": "gold"})
    return spec, rows, meta


def _common(p: argparse.ArgumentParser) -> None:
    from .compiler import LABEL_MODES

    p.add_argument("--model", required=True, type=Path, help="exported model directory")
    p.add_argument("--dataset", default=None, help="a named dataset (typed_decisions.datasets.DATASETS)")
    p.add_argument("--data", type=Path, default=None, help="JSONL rows (with --spec or --preset)")
    p.add_argument("--spec", type=Path, default=None, help="question spec JSON (evaluation.QuestionSpec)")
    p.add_argument("--preset", default=None, help="ask a shipped preset's question (its version is recorded)")
    p.add_argument("--labels", choices=LABEL_MODES, default="auto",
                   help="label mode (default 'auto': names for choice, letters for score)")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: all cores)")
    p.add_argument("--bins", type=int, default=10, help="equal-width confidence bins for ECE (default 10)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def main_eval(argv: list[str]) -> int:
    """``typed-decisions eval``: see the module docstring and docs/evaluation.md."""
    p = argparse.ArgumentParser(prog="typed-decisions eval", description="Evaluate a question on labelled data.")
    _common(p)
    p.add_argument("--split", choices=["test", "calibration", "all"], default="test")
    p.add_argument("--limit", type=int, default=None, help="first N rows of the split (fixed hash order)")
    p.add_argument("--calibration", type=Path, default=None, help="also report metrics after this calibration file")
    p.add_argument("--permutations", type=int, default=0, metavar="K",
                   help="re-ask each row under K option orders (choice questions): flip rate, TV")
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    p.add_argument("--plot", type=Path, default=None, help="write a reliability diagram (PNG; needs matplotlib)")
    p.add_argument("--free-text", action="store_true",
                   help="free-text generation baseline: not in the torch-free runtime (see docs/evaluation.md)")
    args = p.parse_args(argv)
    if args.free_text:
        print("typed-decisions eval: --free-text needs generation, which this runtime never does; run "
              "benchmarks/free_text_baseline.py (transformers + torch) instead. See docs/evaluation.md.",
              file=sys.stderr)
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (fail before the long run, not after)
        except ImportError:
            print(f"typed-decisions eval: {MATPLOTLIB_HINT}", file=sys.stderr)
            return 2
    from .decider import Decider

    spec, rows, meta = _source(args, args.split, args.limit)
    cal = CalibrationFile.load(args.calibration) if args.calibration else None
    decider = Decider.from_dir(args.model, threads=args.threads, label_mode=args.labels)
    meta["command"] = "typed-decisions eval " + " ".join(argv)
    report = evaluate(decider, spec, rows, label_mode=args.labels, calibration=cal,
                      permutations=args.permutations, n_bins=args.bins, progress=not args.quiet, meta=meta)
    _print_summary(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"report: {args.out}")
    if args.plot:
        print(f"plot: {plot_reliability(report, args.plot)}")
    return 0


def _fmt(m: Mapping[str, Any]) -> str:
    return (f"acc {m['accuracy']:.3f}  macro-F1 {m['macro_f1']:.3f}  NLL {m['nll']:.3f}  "
            f"Brier {m['brier']:.3f}  ECE{m.get('ece_bins', 10)} {m['ece']:.3f}")


def _print_summary(report: Mapping[str, Any]) -> None:
    src = report.get("dataset") or report.get("data")
    print(f"{src} [{report.get('split')}] n={report['n']}  model {report['model']}  labels {report['label_mode']}"
          f"{' → ' + report['labels'] if report.get('labels', report['label_mode']) != report['label_mode'] else ''}  "
          f"{report['rows_per_second']:.2f} rows/s")
    print("raw         " + _fmt(report["metrics"]))
    if "calibrated" in report:
        print("calibrated  " + _fmt(report["calibrated"]))
    print("risk-coverage (max p >= t): " + "  ".join(
        f"t={r['threshold']:g}: cov {r['coverage']:.2f} acc {'-' if r['accuracy'] is None else format(r['accuracy'], '.2f')}"
        for r in report["metrics"]["risk_coverage"]))
    if "permutation" in report:
        perm = report["permutation"]
        print("permutation: " + (perm["skipped"] if "skipped" in perm else
                                 f"flip rate {perm['flip_rate']:.3f}  mean TV {perm['mean_tv']:.3f}  max TV {perm['max_tv']:.3f}"))


def main_calibrate(argv: list[str]) -> int:
    """``typed-decisions calibrate``: fit on the calibration split, report on the test split."""
    p = argparse.ArgumentParser(prog="typed-decisions calibrate",
                                description="Fit per-type calibration on the calibration split; report on test.")
    _common(p)
    p.add_argument("--limit", type=int, default=200, help="rows of the calibration split to fit on (default 200)")
    p.add_argument("--test-limit", type=int, default=200, help="rows of the test split to report on (default 200)")
    p.add_argument("--content-free", default="N/A", help="content-free state for contextual calibration")
    p.add_argument("--method", choices=["auto", "none", "temperature", "contextual", "combined"], default="auto",
                   help="what to write; auto = lowest NLL on the calibration split")
    p.add_argument("--out", type=Path, required=True, help="calibration file to write (CalibrationFile JSON)")
    p.add_argument("--merge", action="store_true", help="keep the other question types of an existing --out")
    p.add_argument("--report", type=Path, default=None, help="write the fit report (JSON) here")
    args = p.parse_args(argv)
    from .decider import Decider

    spec, fit_rows, meta = _source(args, "calibration", args.limit)
    _, test_rows, _ = _source(args, "test", args.test_limit)
    if not fit_rows or not test_rows:
        raise TypedDecisionsError(f"need rows in both splits, got {len(fit_rows)} calibration and {len(test_rows)} test")
    decider = Decider.from_dir(args.model, threads=args.threads, label_mode=args.labels)
    fp, fg = collect_probabilities(decider, spec, fit_rows, label_mode=args.labels, progress=not args.quiet,
                                   desc="calibration split")
    tp, tg = collect_probabilities(decider, spec, test_rows, label_mode=args.labels, progress=not args.quiet,
                                   desc="test split")
    cf = content_free_probabilities(decider, spec, args.content_free, label_mode=args.labels)
    fit = calibration_fit(fp, fg, tp, tg, cf, qtype=spec.type, n_bins=args.bins)
    chosen = fit["best"] if args.method == "auto" else args.method
    v = fit["variants"][chosen]
    per_type: dict[str, TypeCalibration] = {}
    if args.merge and args.out.exists():
        old = CalibrationFile.load(args.out)
        if old.model != decider.name:
            raise TypedDecisionsError(f"--merge: {args.out} was fitted on {old.model!r}, this model is {decider.name!r}")
        per_type.update(old.per_type)
    per_type[spec.type] = TypeCalibration(temperature=v["temperature"], contextual=v["contextual"])
    src = meta.get("dataset") or meta.get("data")
    cal = CalibrationFile(model=decider.name, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          per_type=per_type,  # type: ignore[arg-type]
                          content_free_state=args.content_free if any(c.contextual for c in per_type.values()) else None,
                          notes=f"{spec.type}: {chosen} fitted on {len(fit_rows)} rows of {src} (calibration split, "
                                f"labels {resolve_label_mode(spec.type, args.labels)}); test NLL {v['test']['nll']:.4f} vs {fit['variants']['none']['test']['nll']:.4f} raw")
    cal.save(args.out)
    print(f"{src}: fit n={len(fit_rows)}, test n={len(test_rows)}, type {spec.type}, p_cf({args.content_free!r}) = "
          + ", ".join(f"{x:.3f}" for x in cf))
    print(f"{'variant':<12} {'T':>7}  {'fit NLL':>8}  {'test NLL':>8}  {'test acc':>8}  {'test ECE':>8}  {'test Brier':>10}")
    for name, r in fit["variants"].items():
        print(f"{name:<12} {r['temperature']:>7.3f}  {r['fit']['nll']:>8.4f}  {r['test']['nll']:>8.4f}  "
              f"{r['test']['accuracy']:>8.3f}  {r['test']['ece']:>8.4f}  {r['test']['brier']:>10.4f}")
    print(f"wrote {args.out}: {spec.type} = {chosen}")
    if args.report:
        args.report.write_text(json.dumps({**meta, "model": decider.name, "question": spec.model_dump(),
                                           "label_mode": args.labels,
                                           "labels": resolve_label_mode(spec.type, args.labels), "fit_n": len(fit_rows), "test_n": len(test_rows),
                                           "chosen": chosen, **fit}, indent=1) + "\n", encoding="utf-8")
    return 0

