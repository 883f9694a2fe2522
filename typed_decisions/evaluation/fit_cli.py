"""``typed-decisions fit``: a head fitted on labelled rows, written into a preset.

The rows come as for ``eval`` (``--data rows.jsonl --spec spec.json``, ``--dataset NAME``, or
``--preset NAME|FILE``); each becomes ``{"state", "answer", "instructions"?}`` (``head_rows``) and
``Decider.fit`` reads them once and fits the head (``typed_decisions/head_regression.py``). The output is a
preset (``presets.Preset``) whose ``fitted`` entry for this model holds the head: a new preset
(version 1, named after the spec's question) or, with ``--preset``, that preset's copy with the head
added (a shipped preset's version + 1, like ``calibrate --to-preset``). With ``--test-limit N`` the
head and the zero-shot readout are also scored on N rows of the test split (metrics.py).

    typed-decisions fit --model default --data tickets.jsonl --spec spec.json --out team.json
    typed-decisions presets answer team.json --model default "I was billed twice"
    typed-decisions serve --model default --preset team.json      # POST /v1/presets/team
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compiler import LABEL_MODES
from ..errors import InvalidRequestError
from ..fitted import FittedHead
from ..wording import WORDINGS
from .metrics import metrics
from .sources import question_rows
from ..presets import load_preset, preset_file, with_head
from ..spec import QuestionSpec

if TYPE_CHECKING:
    from ..decider import Decider

__all__ = ["head_rows", "fit_spec", "first_per_class", "score_head", "main_fit"]

CALIBRATED_FROM = 8  # rows per option from which the dev bench finds a fitted head calibrated


def head_rows(spec: QuestionSpec, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a labelled set as ``Decider.fit`` takes them: state, the gold option's wire key
    (choice: name; score: level number; noul: yes/no), and the row's own question text if any.
    A row without a state or a gold label, or with a label that is not an option, is refused
    with its index and field (``QuestionSpec.state`` / ``gold_index``)."""
    out = []
    for n, r in enumerate(rows):
        row = {"state": spec.state(r, n), "answer": spec.wire_answer(spec.option_names[spec.gold_index(r, n)])}
        own = spec.instructions_for(r, n)
        if own is not None:
            row["instructions"] = own
        out.append(row)
    return out


def first_per_class(gold: Sequence[int], k: int) -> list[int]:
    """Indices of the first k rows of each class, in the rows' order (a learning curve's k rows
    per class: nested, so k = 8 rows are among k = 32's).

    >>> first_per_class([0, 1, 0, 0, 1], 2)
    [0, 1, 2, 4]
    """
    seen: dict[int, int] = {}
    out = []
    for i, g in enumerate(gold):
        if seen.get(g, 0) < k:
            seen[g] = seen.get(g, 0) + 1
            out.append(i)
    return out


def fit_spec(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], **kwargs: Any) -> FittedHead:
    """``Decider.fit`` of the spec's question on a labelled set's rows (``kwargs`` go to it)."""
    return decider.fit(spec.question(), head_rows(spec, rows), **kwargs)


def score_head(decider: Decider, head: FittedHead, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
               examples: Sequence[Mapping[str, Any]] | None = None, n_bins: int = 10) -> dict[str, Any]:
    """Metrics (metrics.py) of the zero-shot readout and of the head on the same rows (one read per row)."""
    gold = np.array([spec.gold_index(r, n) for n, r in enumerate(rows)])
    hidden, zero, _ = decider.features(spec.question(), head_rows(spec, rows), examples=examples)
    idx = head.order(decider.option_keys(decider.parse_question(spec.question())))  # each class's column
    fitted = np.empty_like(zero)
    fitted[:, idx] = head.probabilities(hidden, zero[:, idx])
    return {"rows": len(rows), "zero_shot": metrics(list(zero), list(gold), n_bins=n_bins),
            "fitted": metrics(list(fitted), list(gold), n_bins=n_bins)}


def _preset_data(args: argparse.Namespace, spec: QuestionSpec) -> tuple[dict[str, Any], bool]:
    """(the preset JSON to add the head to, whether its version is bumped)."""
    if args.preset:
        path = Path(args.preset)
        if path.suffix == ".json" and path.is_file():
            return json.loads(path.read_text(encoding="utf-8")), False
        load_preset(args.preset)  # checks the shipped preset against its registered hash
        return json.loads(preset_file(args.preset).read_text(encoding="utf-8")), True
    q = spec.model_dump(exclude={"state_field", "gold_field", "gold_map", "instructions_field"}, exclude_none=True)
    return {"name": spec.name, "version": 1, "description": f"fitted on {args.data or args.dataset}",
            "question": q}, False


def main_fit(argv: list[str]) -> int:
    """``typed-decisions fit``: see the module docstring and docs/evaluation.md."""
    from ..decider import Decider

    p = argparse.ArgumentParser(prog="typed-decisions fit",
                                description="Fit a head on labelled rows and write it into a preset.")
    p.add_argument("--model", required=True, help="exported model directory, or a catalogue name")
    p.add_argument("--dataset", default=None, help="a named dataset (its calibration split by default)")
    p.add_argument("--data", type=Path, default=None, help="JSONL rows (with --spec or --preset)")
    p.add_argument("--spec", type=Path, default=None, help="question spec JSON (evaluation.QuestionSpec)")
    p.add_argument("--preset", default=None, help="a shipped preset's name or a preset .json: its question, and "
                                                  "the preset the head is added to")
    p.add_argument("--split", choices=["calibration", "test", "all"], default=None,
                   help="rows to fit on (default: 'calibration' of a dataset, 'all' of a --data file)")
    p.add_argument("--limit", type=int, default=None, help="fit on the first N rows of the split (fixed hash order)")
    p.add_argument("--test-limit", type=int, default=0, help="also score head and zero-shot on N test-split rows")
    p.add_argument("--debias", choices=["canonical", "none", "rotate"], default=None,
                   help="how choice rows are read: canonical (default: one read per row, one prompt for every "
                        "listing of the options) or none with --rotations")
    p.add_argument("--rotations", type=int, default=None,
                   help="with --debias none: read each choice row under R cyclic option orders (default: every "
                        "rotation, at most 8)")
    p.add_argument("--layers", default="last",
                   help="the states the head reads: last (default), auto (the export's deepest mid layer and the "
                        "last), or layer counts and 'last', comma-separated (e.g. 18,last)")
    p.add_argument("--method", choices=["anchored", "free"], default="anchored",
                   help="anchored (default): start from the zero-shot reading, move as far as the rows justify; "
                        "free: a regression from scratch")
    p.add_argument("--components", type=int, default=256, help="PCA dimensions of the hidden state (default 256)")
    p.add_argument("--prior", default="rows", help="the task's class frequencies: 'rows' (the rows were sampled as "
                                                   "the answers occur, default), 'uniform', or one frequency per "
                                                   "option, comma-separated, in option order (rows sampled k per "
                                                   "option are not the task's frequencies: give these)")
    p.add_argument("--force", action="store_true",
                   help="write the head even when its cross-validation finds it behind the zero-shot reading")
    p.add_argument("--calibrate", choices=["none", "temperature"], default="none",
                   help="temperature: divide the head's logits by the temperature its cross-validated predictions fit")
    p.add_argument("--labels", choices=LABEL_MODES, default="auto")
    p.add_argument("--wording", choices=list(WORDINGS), default="default")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, required=True, help="the preset JSON to write")
    p.add_argument("--bins", type=int, default=10)
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    split = args.split or ("all" if args.data else "calibration")
    spec, rows, meta = question_rows(args, split, args.limit)
    if not rows:
        raise InvalidRequestError(f"no rows to fit on in split {split!r}")
    preset, bump = _preset_data(args, spec)
    examples = None
    if preset.get("examples"):
        from ..presets import Preset
        examples = Preset.model_validate({**preset, "fitted": None, "calibration": None}).wire_examples()
    decider = Decider.load(args.model, threads=args.threads, label_mode=args.labels, wording=args.wording)
    command = "typed-decisions fit " + shlex.join(argv)
    prior: str | list[float] = args.prior
    if args.prior not in ("rows", "uniform"):
        try:
            prior = [float(x) for x in args.prior.split(",")]
        except ValueError:
            raise InvalidRequestError(f"--prior: 'rows', 'uniform' or numbers, got {args.prior!r}") from None
        if len(prior) != len(spec.options) or min(prior) <= 0:
            raise InvalidRequestError(f"--prior: {len(spec.options)} frequencies > 0 (one per option: "
                                      f"{', '.join(spec.option_names)}), got {args.prior!r}")
    layers = args.layers if args.layers in ("auto", "last") else [x.strip() for x in args.layers.split(",")]
    if not args.quiet:
        print(expected_time(decider, spec, rows, debias=args.debias, rotations=args.rotations, examples=examples))
    head = fit_spec(decider, spec, rows, rotations=args.rotations, debias=args.debias, components=args.components,
                    layers=layers, method=args.method, prior=prior, calibrate=args.calibrate, examples=examples,
                    progress=not args.quiet, command=command)
    f = head.fitted
    assert f is not None
    reg = "λ=∞ (the rows moved nothing: the zero-shot reading)" if f.l2 is None else (
        f"λ={f.l2:g}" if f.method == "anchored" else f"C={f.l2:g}")
    print(f"fitted head {head.id} for {head.model}: {f.rows} rows {f.rows_per_class}, {f.method}, reads "
          f"{'+'.join(map(str, head.layers))}, {f.components} PCA dimensions, {reg} by {f.folds}-fold CV: accuracy "
          f"{f.cv_accuracy if f.cv_accuracy is None else round(f.cv_accuracy, 3)} held out "
          f"(zero-shot on the same rows {f.zero_shot_cv_accuracy:.3f}), {f.seconds:.1f} s")
    behind = f.behind_zero_shot
    if f.cv_gain is not None:
        gain, low, high = f.cv_gain
        nll = "" if f.cv_nll is None or f.zero_shot_cv_nll is None else \
            f"; log-loss {f.cv_nll:.3f} (zero-shot {f.zero_shot_cv_nll:.3f})"
        print(f"  head − zero-shot, held out: {gain:+.3f} [{low:+.3f}, {high:+.3f}] (paired, 95 %, {f.rows} rows){nll}")
        if behind and not args.force:
            print(f"error: the head is behind the zero-shot reading on its own held-out rows (accuracy {gain:+.3f} "
                  f"[{low:+.3f}, {high:+.3f}], "
                  f"log-loss {f.cv_nll:.3f} vs {f.zero_shot_cv_nll if f.zero_shot_cv_nll is None else round(f.zero_shot_cv_nll, 3)}); "
                  f"nothing written. Serve the zero-shot reading, give more rows, or --force to write it anyway",
                  file=sys.stderr)
            return 1
        if behind:
            print("  WARNING: written because of --force although its cross-validation finds it behind the zero-shot "
                  "reading", file=sys.stderr)
        elif low <= 0:
            print("  note: the interval reaches 0, so these rows do not show the head ahead of the zero-shot "
                  "reading (few rows per option, or rows the zero-shot reading already answers, cannot); score it "
                  "on rows it was not fitted on (--split calibration --test-limit N: the rest of the file; or "
                  "eval --preset) before serving it, or give more rows (docs/evaluation.md, 'Fitted heads')")
    counts = list(f.rows_per_class.values())
    if min(counts) < CALIBRATED_FROM:
        print(f"  note: {min(counts)} rows of some option; below {CALIBRATED_FROM} per option a head's probabilities "
              "are not calibrated (on the dev bench, pooled ECE 0.09 with 2 rows per option, 0.02 with 8): "
              "read its answers, not its confidences, or give more rows (docs/evaluation.md, 'Fitted heads')")
    if args.prior == "rows" and len(set(counts)) == 1:
        print(f"  note: the rows hold every option equally often ({counts[0]} each), and --prior rows takes that as "
              "how often the answers occur; if they occur otherwise, give --prior with their frequencies")
    if args.test_limit:
        _, test_rows, _ = question_rows(args, "test", args.test_limit)
        rep = score_head(decider, head, spec, test_rows, examples=examples, n_bins=args.bins)
        for name in ("zero_shot", "fitted"):
            m = rep[name]
            print(f"  test ({rep['rows']} rows) {name:9s} accuracy {m['accuracy']:.3f}  NLL {m['nll']:.3f}  "
                  f"ECE {m['ece']:.3f}")
    out = with_head(preset, head, bump=bump)
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"preset: {args.out} ({out['name']} v{out['version']})")
    return 0


def expected_time(decider: Decider, spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], *,
                  debias: str | None, rotations: int | None,
                  examples: Sequence[Mapping[str, Any]] | None = None) -> str:
    """"reading N rows × R orders: about T" — the reads ``fit`` will make, timed by a read of the
    second row after one of the first (which warms the engine up); both prompts are then in the
    prefix cache, so the fit's own reads of them cost little."""
    import time

    from ..debias import rotation_shifts

    n_orders = 1
    if spec.type == "choice" and (debias or "canonical") != "canonical":
        n_orders = rotations or len(rotation_shifts(len(spec.options)))
    how = {"debias": debias or ("canonical" if spec.type == "choice" else None), "examples": examples}
    first, second = head_rows(spec, rows[:1]), head_rows(spec, rows[1:2])
    decider.features(spec.question(), first, **how)
    t0 = time.perf_counter()
    decider.features(spec.question(), second or first, **how)
    per_read = time.perf_counter() - t0
    total = per_read * len(rows) * n_orders
    orders = f" × {n_orders} option orders" if n_orders > 1 else ""
    return f"reading {len(rows)} rows{orders}: about {total / 60:.1f} min ({per_read:.2f} s a read)"
