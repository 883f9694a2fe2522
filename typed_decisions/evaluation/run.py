"""Evaluation on labelled data: ask one question of every row, compare with the gold label.

Input: rows (dicts; a JSONL file or a named dataset from ``datasets.py``) and a ``QuestionSpec``
(``spec.py``). Output: a JSON-able report with

    accuracy, macro-F1, NLL, Brier, ECE        the formulas of metrics.py (docs/METHOD.md §5)
    reliability                                per confidence bin: count, accuracy, mean confidence
    risk_coverage                              for thresholds t: coverage = share of rows with max p >= t,
                                               accuracy on those rows (what acting only above t gives)
    permutation (choice only)                  option-order flip rate and total variation (permutation.py)
    calibrated                                 the same metrics after a calibration file, when given
    label_mass (``label_mass=True``)           mean label mass, and accuracy at equal coverage when
                                               abstaining by max p, by label mass, or by their product
                                               (metrics.coverage_accuracy); items carry their mass

Confidence here is the top option probability max_i p_i (ECE, reliability, risk-coverage), not
the answer's reported confidence formula; they rank rows identically for typesafe confidence.

The engine is reached only through ``Decider.probabilities``; this module imports no onnxruntime
itself, and matplotlib only inside ``plot_reliability``. The argparse commands are in ``cli.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..calibration import CalibrationFile
from ..compiler import resolve_label_mode
from ..errors import TypedDecisionsError
from ..fitted import FittedHead
from .calibration_fitting import apply_calibration
from .metrics import THRESHOLDS, coverage_accuracy, metrics
from .permutation import permutation_report
from ..spec import QuestionSpec

if TYPE_CHECKING:
    from ..decider import Decider

__all__ = ["MATPLOTLIB_HINT", "collect_probabilities", "collect_readouts", "content_free_probabilities", "evaluate",
           "plot_reliability"]

MATPLOTLIB_HINT = "the reliability plot needs matplotlib: pip install matplotlib  (or the [eval] extra)"


# ---------------------------------------------------------------- asking the model


def _with_examples(request: dict[str, Any], examples: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The request with the few-shot examples added (``schema.Example``; none: unchanged)."""
    return {**request, "examples": list(examples)} if examples else request


def collect_probabilities(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
                          label_mode: str | None = None, progress: bool = True,
                          desc: str = "eval", debias: str | None = None,
                          examples: Sequence[Mapping[str, Any]] | None = None) -> tuple[list[np.ndarray], list[int]]:
    """Uncalibrated option probabilities (option order of the spec) and gold indices, one per row."""
    probs, gold, _ = collect_readouts(decider, spec, rows, label_mode=label_mode, progress=progress,
                                      desc=desc, debias=debias, examples=examples)
    return probs, gold


def collect_readouts(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
                     label_mode: str | None = None, progress: bool = True, desc: str = "eval",
                     debias: str | None = None, label_mass: bool = False,
                     examples: Sequence[Mapping[str, Any]] | None = None, head: FittedHead | None = None
                     ) -> tuple[list[np.ndarray], list[int], list[float] | None]:
    """Probabilities and gold indices as ``collect_probabilities``, and each row's label mass
    (None unless ``label_mass``: it costs one full-vocabulary product per row). ``examples``
    (wire few-shot examples, ``QuestionSpec.example``) are shown before every row's state.
    ``head``: a fitted head answers instead of the zero-shot readout (``fitted.py``)."""
    from tqdm.auto import tqdm

    from ..decider import fitted_probabilities

    gold = [spec.gold_index(r, n) for n, r in enumerate(rows)]  # fail on a bad label before any compute
    probs, masses = [], []
    for n, r in enumerate(tqdm(rows, desc=desc, unit="row", disable=not progress)):
        read = decider.readouts(_with_examples(spec.row_request(decider.name, r, n), examples), label_mode=label_mode,
                                debias=debias, label_mass=label_mass, hidden=head is not None)[spec.name]
        probs.append(read.probabilities() if head is None else fitted_probabilities(head, read))
        masses.append(read.mean_label_mass())
    return probs, gold, [float(m) for m in masses] if label_mass else None  # type: ignore[arg-type]


def content_free_probabilities(decider: Decider, spec: QuestionSpec, state: str = "N/A", *,
                               label_mode: str | None = None,
                               examples: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
    """p_cf: the question's probabilities for a content-free state (contextual calibration)."""
    return decider.probabilities(_with_examples(spec.request(decider.name, state), examples),
                                 label_mode=label_mode)[spec.name]


def _permutations(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], k: int, *,
                  label_mode: str | None, progress: bool,
                  examples: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Mean flip rate and TV over rows, each row re-asked under k option orders (choice only)."""
    from tqdm.auto import tqdm

    if spec.type != "choice":
        return {"skipped": f"{spec.type} options have a fixed order (yes/no, levels lowest first)"}
    flips, mean_tv, max_tv = [], [], []
    for n, r in enumerate(tqdm(rows, desc="permutations", unit="row", disable=not progress)):
        def probs_for(order: list[int], r: Mapping[str, Any] = r, n: int = n) -> np.ndarray:
            return decider.probabilities(_with_examples(spec.row_request(decider.name, r, n, order), examples),
                                         label_mode=label_mode)[spec.name]

        rep = permutation_report(probs_for, list(range(len(spec.options))), k=k, seed=n)
        flips.append(rep.flip_rate)
        mean_tv.append(rep.mean_tv)
        max_tv.append(rep.max_tv)
    return {"k": k, "rows": len(rows), "flip_rate": float(np.mean(flips)), "mean_tv": float(np.mean(mean_tv)),
            "max_tv": float(np.max(max_tv)), "seed": "row index"}


def evaluate(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
             label_mode: str | None = None, calibration: CalibrationFile | None = None,
             permutations: int = 0, n_bins: int = 10, thresholds: Sequence[float] = THRESHOLDS,
             progress: bool = True, meta: Mapping[str, Any] | None = None, debias: str | None = None,
             label_mass: bool = False, examples: Sequence[Mapping[str, Any]] | None = None,
             head: FittedHead | None = None) -> dict[str, Any]:
    """Ask ``spec`` of every row; the report (module docstring). ``meta`` is copied into it.
    ``examples``: wire few-shot examples shown before every row (the report counts them)."""
    if not rows:
        raise TypedDecisionsError("no rows to evaluate (empty dataset or split, or --limit 0)")
    reading = decider.settings(label_mode=label_mode, debias=debias)  # the rows' requests set no debias of their own
    mode, deb = reading.label_mode, reading.debias
    t0 = time.perf_counter()
    probs, gold, masses = collect_readouts(decider, spec, rows, label_mode=mode, progress=progress,
                                           debias=deb, label_mass=label_mass, examples=examples, head=head)
    seconds = time.perf_counter() - t0
    report: dict[str, Any] = {
        "model": decider.name, **(meta or {}), "question": spec.model_dump(), "label_mode": mode, "debias": deb,
        "labels": resolve_label_mode(spec.type, mode),  # what this question type was compiled with
        "examples": len(examples or []),  # few-shot examples shown before every row
        "fitted_head": None if head is None else head.id,  # a head answered instead of the zero-shot readout
        "n": len(rows), "seconds": round(seconds, 3), "rows_per_second": round(len(rows) / seconds, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "class_counts": {o: int(sum(1 for y in gold if y == i)) for i, o in enumerate(spec.option_names)},
        "metrics": metrics(probs, gold, n_bins=n_bins, qtype=spec.type, thresholds=thresholds),
    }
    if calibration is not None:
        tc = calibration.for_type(spec.type)
        cf = (decider.probabilities(_with_examples(spec.request(decider.name, calibration.content_free_state or ""),
                                                   examples),
                                    label_mode=mode, debias=deb)[spec.name] if tc.contextual else None)
        report["calibration"] = {"model": calibration.model, "version": calibration.version,
                                 "temperature": tc.temperature, "contextual": tc.contextual,
                                 "content_free_state": calibration.content_free_state if tc.contextual else None,
                                 "content_free_probabilities": cf.tolist() if cf is not None else None}
        report["calibrated"] = metrics(apply_calibration(probs, tc, cf), gold, n_bins=n_bins, qtype=spec.type,
                                       thresholds=thresholds)
    if permutations > 0:
        report["permutation"] = _permutations(decider, spec, rows, permutations, label_mode=mode, progress=progress,
                                              examples=examples)
    if masses is not None:
        conf = [float(np.max(p)) for p in probs]
        hits = [float(np.argmax(p) == y) for p, y in zip(probs, gold)]
        report["label_mass"] = {
            "mean": float(np.mean(masses)), "min": float(np.min(masses)),
            "by_confidence": coverage_accuracy(conf, hits),
            "by_label_mass": coverage_accuracy(masses, hits),
            "by_product": coverage_accuracy([c * m for c, m in zip(conf, masses)], hits)}
    report["items"] = [{"gold": int(y), "probabilities": [round(float(x), 6) for x in p]}
                       for p, y in zip(probs, gold)]
    if masses is not None:
        for item, m in zip(report["items"], masses):
            item["label_mass"] = m
    return report


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
