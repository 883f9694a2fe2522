"""The evaluation commands: ``typed-decisions eval`` and ``calibrate``.

Argument parsing and printing only; the work is in ``run.py`` (asking and scoring), ``calibration_fitting.py``
(calibration fitting), ``sources.py`` (the rows the arguments name) and ``datasets.py``. Each ``main_*`` takes the arguments after its
subcommand and returns the exit status (``typed_decisions.cli`` dispatches to them). The
``presets`` command is the presets' own (``typed_decisions/presets/cli.py``); ``calibrate
--to-preset`` writes a preset through ``typed_decisions.presets``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..calibration import CalibrationFile, TypeCalibration
from ..compiler import LABEL_MODES, resolve_label_mode
from ..debias import DEBIAS_MODES
from ..wording import WORDINGS
from ..errors import InvalidRequestError, TypedDecisionsError
from .calibration_fitting import calibration_fit
from ..presets import (DeciderSettings, Preset, PresetCalibration, PresetFit, examples_hash, load_preset, preset_file,
                      select_head, with_calibration)
from .sources import read_jsonl, question_rows
from .run import MATPLOTLIB_HINT, collect_probabilities, content_free_probabilities, evaluate, plot_reliability
from ..spec import QuestionSpec, shot_rows

__all__ = ["main_calibrate", "main_eval", "read_jsonl"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="exported model directory, or a catalogue name ('default', 'tiny', 'NAME:int8')")
    p.add_argument("--dataset", default=None, help="a named dataset (typed_decisions.evaluation.datasets.DATASETS)")
    p.add_argument("--data", type=Path, default=None, help="JSONL rows (with --spec or --preset)")
    p.add_argument("--spec", type=Path, default=None, help="question spec JSON (typed_decisions.evaluation.QuestionSpec)")
    p.add_argument("--preset", default=None, help="ask a shipped preset's question (its version is recorded)")
    p.add_argument("--labels", choices=LABEL_MODES, default="auto",
                   help="label mode (default 'auto': names for choice, letters for score)")
    p.add_argument("--wording", choices=list(WORDINGS), default="default",
                   help="system prompt and question-block sentences by name (typed_decisions/wording.py)")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: the cores this process may use)")
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
    p.add_argument("--debias", choices=DEBIAS_MODES, default="none",
                   help="'canonical': options shown in an order fixed by the option set; 'rotate': each row's "
                        "answer is the mean over rotations of that order")
    p.add_argument("--label-mass", action="store_true",
                   help="read each row's label mass (one full-vocabulary product per row): items carry it, "
                        "and the report compares abstaining by it with abstaining by max p")
    p.add_argument("--shots", type=int, default=0, metavar="K",
                   help="few-shot: show K labelled rows of the calibration split before every state (one per "
                        "class first, then fixed hash order; replaces a preset's own examples)")
    p.add_argument("--zero-shot", action="store_true",
                   help="with --preset: the zero-shot readout even where the preset has a fitted head for this model")
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    p.add_argument("--plot", type=Path, default=None, help="write a reliability diagram (PNG; needs matplotlib)")
    p.add_argument("--free-text", action="store_true",
                   help="free-text generation baseline: not in the torch-free runtime (see docs/evaluation.md)")
    args = p.parse_args(argv)
    if args.free_text:
        print("typed-decisions eval: --free-text needs generation, which this runtime never does; run "
              "benchmarks/peers/free_text.py (transformers + torch) instead. See docs/evaluation.md.",
              file=sys.stderr)
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (fail before the long run, not after)
        except ImportError:
            print(f"typed-decisions eval: {MATPLOTLIB_HINT}", file=sys.stderr)
            return 2
    from ..decider import Decider

    spec, rows, meta = question_rows(args, args.split, args.limit)
    rows, examples = _examples(args, spec, rows, meta)
    cal = CalibrationFile.load(args.calibration) if args.calibration else None
    decider = Decider.from_dir(args.model, threads=args.threads, label_mode=args.labels, wording=args.wording)
    meta["wording"] = args.wording
    meta["command"] = "typed-decisions eval " + " ".join(argv)
    head = None
    if args.preset and not args.zero_shot:  # a preset's fitted head for this model answers (refused if stale)
        head, note = select_head(load_preset(args.preset), DeciderSettings.of(decider))
        if head is not None:
            probe = {**spec.request(decider.name, "-"), **({"examples": examples} if examples else {})}
            decider.check_heads(probe, {spec.name: head}, debias=args.debias)
            meta["fitted"] = note
    report = evaluate(decider, spec, rows, label_mode=args.labels, calibration=cal,
                      permutations=args.permutations, n_bins=args.bins, progress=not args.quiet, meta=meta,
                      debias=args.debias, label_mass=args.label_mass, examples=examples, head=head)
    _print_summary(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"report: {args.out}")
    if args.plot:
        print(f"plot: {plot_reliability(report, args.plot)}")
    return 0


def _examples(args: argparse.Namespace, spec: QuestionSpec, rows: list[dict[str, Any]], meta: dict[str, Any]
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(rows to ask, few-shot examples): ``--shots K`` rows of the calibration split (never asked
    themselves), else a preset's own examples, else none."""
    if args.shots < 0:
        raise InvalidRequestError(f"--shots must be >= 0, got {args.shots}")
    if args.shots:
        _, pool, _ = question_rows(args, "calibration", None)
        shots = shot_rows(spec, pool, args.shots)
        if len(shots) < args.shots:
            raise TypedDecisionsError(f"--shots {args.shots}: the calibration split has only {len(shots)} rows")
        meta["shots"] = {"k": args.shots, "from": "calibration split: one row per class first, then hash order",
                         "gold": [spec.option_names[spec.gold_index(r, n)] for n, r in enumerate(shots)]}
        return [r for r in rows if r not in shots], [spec.example(r, n) for n, r in enumerate(shots)]
    if getattr(args, "preset", None):
        preset = load_preset(args.preset)
        if preset.examples:
            meta["shots"] = {"k": len(preset.examples), "from": f"preset {preset.name} v{preset.version}"}
            return rows, preset.wire_examples()
    return rows, None


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
    p.add_argument("--out", type=Path, default=None, help="calibration file to write (CalibrationFile JSON)")
    p.add_argument("--to-preset", type=Path, default=None,
                   help="with --preset: write the preset (JSON) with this fit as its calibration for this model; "
                        "a shipped preset's copy gets version + 1 (ship it: typed-decisions presets register FILE)")
    p.add_argument("--merge", action="store_true", help="keep the other question types of an existing --out")
    p.add_argument("--report", type=Path, default=None, help="write the fit report (JSON) here")
    args = p.parse_args(argv)
    from ..decider import Decider

    if args.out is None and args.to_preset is None:
        raise InvalidRequestError("give --out FILE.json (a calibration file) or --to-preset FILE.json (with --preset)")
    if args.to_preset is not None and not args.preset:
        raise InvalidRequestError("--to-preset needs --preset NAME (or your preset's .json path)")
    if args.merge and args.out is None:
        raise InvalidRequestError("--merge needs --out (a preset holds one question: one type)")
    spec, fit_rows, meta = question_rows(args, "calibration", args.limit)
    _, test_rows, _ = question_rows(args, "test", args.test_limit)
    if not fit_rows or not test_rows:
        raise TypedDecisionsError(f"need rows in both splits, got {len(fit_rows)} calibration and {len(test_rows)} test")
    # A preset with few-shot examples answers after them: its calibration is fitted (and reported)
    # on answers read after the same examples, and never on the example rows themselves.
    preset = load_preset(args.preset) if args.preset else None
    preset_examples = preset.examples if preset is not None else []
    examples = preset.wire_examples() if preset is not None and preset_examples else None
    if preset_examples:
        shown = [ex.state for ex in preset_examples]
        fit_rows = [r for n, r in enumerate(fit_rows) if spec.state(r, n) not in shown]
        test_rows = [r for n, r in enumerate(test_rows) if spec.state(r, n) not in shown]
    decider = Decider.from_dir(args.model, threads=args.threads, label_mode=args.labels, wording=args.wording)
    fp, fg = collect_probabilities(decider, spec, fit_rows, label_mode=args.labels, progress=not args.quiet,
                                   desc="calibration split", examples=examples)
    tp, tg = collect_probabilities(decider, spec, test_rows, label_mode=args.labels, progress=not args.quiet,
                                   desc="test split", examples=examples)
    cf = content_free_probabilities(decider, spec, args.content_free, label_mode=args.labels, examples=examples)
    fit = calibration_fit(fp, fg, tp, tg, cf, qtype=spec.type, n_bins=args.bins)
    chosen = fit["best"] if args.method == "auto" else args.method
    v = fit["variants"][chosen]
    per_type: dict[str, TypeCalibration] = {}
    if args.merge and args.out is not None and args.out.exists():
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
                                f"labels {resolve_label_mode(spec.type, args.labels)}"
                                f"{f', after the {len(preset_examples)} examples of preset {args.preset}' if preset_examples else ''}); test NLL {v['test']['nll']:.4f} vs {fit['variants']['none']['test']['nll']:.4f} raw")
    if args.out is not None:
        cal.save(args.out)
    print(f"{src}: fit n={len(fit_rows)}, test n={len(test_rows)}, type {spec.type}, "
          f"{len(preset_examples)} few-shot examples, p_cf({args.content_free!r}) = "
          + ", ".join(f"{x:.3f}" for x in cf))
    print(f"{'variant':<12} {'T':>7}  {'fit NLL':>8}  {'test NLL':>8}  {'test acc':>8}  {'test ECE':>8}  {'test Brier':>10}")
    for name, r in fit["variants"].items():
        print(f"{name:<12} {r['temperature']:>7.3f}  {r['fit']['nll']:>8.4f}  {r['test']['nll']:>8.4f}  "
              f"{r['test']['accuracy']:>8.3f}  {r['test']['ece']:>8.4f}  {r['test']['brier']:>10.4f}")
    if args.out is not None:
        print(f"wrote {args.out}: {spec.type} = {chosen}")
    if args.to_preset is not None:
        assert preset is not None  # --to-preset needs --preset (checked above)
        _write_preset_calibration(args, argv, preset, DeciderSettings.of(decider).key, fit, chosen, len(fit_rows),
                                  len(test_rows), src)
    if args.report:
        args.report.write_text(json.dumps({**meta, "model": decider.name, "question": spec.model_dump(),
                                           "label_mode": args.labels,
                                           "labels": resolve_label_mode(spec.type, args.labels), "fit_n": len(fit_rows), "test_n": len(test_rows),
                                           "examples": len(preset_examples),
                                           "chosen": chosen, **fit}, indent=1) + "\n", encoding="utf-8")
    return 0


def _write_preset_calibration(args: argparse.Namespace, argv: list[str], preset: Preset, model: str,
                              fit: Mapping[str, Any], chosen: str, fit_n: int, test_n: int, src: str | None) -> None:
    """``calibrate --to-preset``: the preset's JSON with the chosen variant as its entry for ``model``."""
    spec = preset.question_spec()
    v, none = fit["variants"][chosen], fit["variants"]["none"]
    cal = PresetCalibration(
        temperature=v["temperature"], contextual=v["contextual"], labels=resolve_label_mode(spec.type, args.labels),
        debias="none", wording=args.wording, examples=examples_hash(preset.examples),
        content_free_state=args.content_free if v["contextual"] else None,
        content_free=list(fit["content_free_probabilities"]) if v["contextual"] else None,
        fitted=PresetFit(dataset=src, rows=fit_n, method=chosen, test_rows=test_n,  # type: ignore[arg-type]
                         test_nll_before=none["test"]["nll"], test_nll_after=v["test"]["nll"],
                         test_ece_before=none["test"]["ece"], test_ece_after=v["test"]["ece"],
                         date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         command=shlex.join(["typed-decisions", "calibrate", *argv])))
    own = Path(args.preset).suffix == ".json" and Path(args.preset).is_file()
    source = Path(args.preset) if own else preset_file(args.preset)
    data = with_calibration(json.loads(source.read_text(encoding="utf-8")), model, cal, bump=not own)
    args.to_preset.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.to_preset}: preset {data['name']} v{data['version']}, calibration for {model} = "
          f"{chosen} ({cal.describe()})")
    if not own:
        print(f"shipped preset {data['name']} was v{data['version'] - 1}: the copy is v{data['version']}. Add other "
              f"models with --preset {args.to_preset}; ship it with: typed-decisions presets register {args.to_preset}")
