"""The ``typed-decisions`` command: one entry point, one subcommand per pipeline stage.

    typed-decisions models list | pull NAME | path NAME      the offline model catalogue
    typed-decisions export SOURCE --out DIR [--quantize int8]  (needs typed-decisions-export)
    typed-decisions adopt SRC --out DIR                       adopt an Optimum ONNX export (no torch)
    typed-decisions decide [--model NAME|DIR] [--labels ...] [--explain [--json]] [REQUEST.json | -]
    typed-decisions serve --model NAME|DIR [--host H] [--port P]  (needs the [server] extra)
    typed-decisions serve --ray [--replicas N | --autoscale MIN:MAX] [--address ADDR] ...  (typed-decisions-ray)
    typed-decisions label --model DIR --questions Q.json --input F --output OUT/  (typed-decisions-ray)
    typed-decisions playground --model NAME|DIR               serve, and open /playground in a browser
    typed-decisions keys add NAME | list | remove NAME [--file F]   the server's API keys (hashed)
    typed-decisions eval --model DIR (--dataset NAME | --data F.jsonl --spec S.json) [--plot P.png]
    typed-decisions calibrate --model DIR --dataset NAME --out cal.json
    typed-decisions presets list | show NAME | answer NAME --model DIR [STATE | -]
    typed-decisions --version                                 the distribution that owns this package

Heavy or optional modules are imported inside each subcommand, so ``--help`` is instant and the
runtime never imports torch. Errors of this package are printed as one line, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .debias import DEBIAS_MODES
from .errors import InvalidRequestError, TypedDecisionsError

EXPORT_HINT = ("the export step needs the export distribution (torch + transformers): "
               "pip install typed-decisions-export   (from a checkout: pip install -e export/)")


def _cmd_export(argv: list[str]) -> int:
    try:
        from typed_decisions_export.cli import main as export_main
    except ImportError as e:
        if getattr(e, "name", "") and not str(e.name).startswith("typed_decisions_export"):
            raise
        print(f"typed-decisions export: {EXPORT_HINT}", file=sys.stderr)
        return 2
    return int(export_main(argv) or 0)


ADOPT_HINT = ("adopting an ONNX export needs the export distribution's adopter (onnx, no torch at run time): "
              "pip install typed-decisions-export   (from a checkout: pip install -e export/)")


def _cmd_adopt(argv: list[str]) -> int:
    try:
        from typed_decisions_export.adopt.cli import main as adopt_main
    except ImportError as e:
        if getattr(e, "name", "") and not str(e.name).startswith(("typed_decisions_export", "onnx")):
            raise
        print(f"typed-decisions adopt: {ADOPT_HINT}", file=sys.stderr)
        return 2
    return int(adopt_main(argv) or 0)


def _cmd_models(argv: list[str]) -> int:
    from .models_cli import main_models

    return int(main_models(argv) or 0)


MODEL_HELP = ("exported model directory, or a catalogue name/alias ('default', 'tiny'; "
              "'NAME:int8' for its INT8 export) whose export is in the cache")


def load_decider(model: str, *, export_if_missing: bool = False, quiet: bool = False, **kwargs: Any) -> Any:
    """``Decider.load(model)`` with one line of progress on stderr (loading takes seconds)."""
    import time

    from .decider import Decider
    from .exports import ensure_export, locate

    t0 = time.perf_counter()
    path = ensure_export(model, progress=not quiet) if export_if_missing else locate(model)
    if not quiet:
        print(f"loading {path} …", file=sys.stderr, flush=True)
    decider = Decider.load(path, **kwargs)
    if not quiet:
        print(f"loaded {decider.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return decider


def _decide_parser() -> argparse.ArgumentParser:
    from .compiler import LABEL_MODES
    from .wording import WORDINGS

    p = argparse.ArgumentParser(prog="typed-decisions decide",
                                description="Answer a System One request with an exported model.")
    p.add_argument("request", nargs="?", default="-",
                   help="request JSON file ({model, state, questions}); '-' or nothing reads stdin")
    p.add_argument("--model", default=None,
                   help=MODEL_HELP + " (default: the request's own \"model\" field)")
    p.add_argument("--export-if-missing", action="store_true",
                   help="export a catalogue model first if its export is not in the cache (needs the export step)")
    p.add_argument("--labels", choices=LABEL_MODES, default="auto",
                   help="label mode (default 'auto': names for choice, letters for score; 'mixture': "
                        "letter and name read together)")
    p.add_argument("--debias", choices=DEBIAS_MODES, default="none",
                   help="default for requests without a 'debias' field: 'canonical' shows a choice's options in "
                        "an order fixed by the option set, 'rotate' averages the answer over rotations of that "
                        "order (default none: as listed)")
    p.add_argument("--wording", choices=list(WORDINGS), default="default",
                   help="system prompt and question-block sentences by name (typed_decisions/wording.py)")
    p.add_argument("--confidence", choices=["typesafe", "bonsai", "entropy"], default="typesafe")
    p.add_argument("--calibration", type=Path, default=None, help="calibration file to apply")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: the cores this process may use)")
    p.add_argument("--explain", action="store_true",
                   help="a readable report: the prompt with its shared-prefix boundary, per question each "
                        "option's label tokens, logit, probability and calibrated probability, the answer")
    p.add_argument("--json", action="store_true",
                   help="with --explain: the machine form (JSON, answers included) instead of the report")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _cmd_decide(argv: list[str]) -> int:
    args = _decide_parser().parse_args(argv)
    text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text()
    try:
        payload = json.loads(text)
    except ValueError as e:
        raise InvalidRequestError(f"request is not valid JSON: {e}") from None
    model = args.model
    if model is None:
        model = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(model, str) or not model:
            raise InvalidRequestError("no model: pass --model NAME|DIR or set the request's \"model\" "
                                      "to a catalogue name or export directory", ("model",))
    decider = load_decider(model, export_if_missing=args.export_if_missing, quiet=args.quiet,
                           threads=args.threads, confidence=args.confidence,
                           calibration=args.calibration, label_mode=args.labels, debias=args.debias,
                           wording=args.wording)
    if args.explain:
        from .explain import render_text

        explanation = decider.explain(payload)
        print(explanation.model_dump_json(indent=2) if args.json else render_text(explanation))
    else:
        print(decider.run(payload).model_dump_json(indent=2))
    return 0


RAY_HINT = ("needs the Ray distribution (ray[serve,data]): pip install typed-decisions-ray   "
            "(from a checkout: pip install -e integrations/ray/)")


def _ray_cli() -> Any:
    """``ray_typed_decisions.cli``, imported only for ``serve --ray`` and ``label``; None (after
    one line naming the distribution to install) when it is not installed."""
    try:
        from ray_typed_decisions import cli
    except ImportError as e:
        if getattr(e, "name", "") and not str(e.name).startswith(("ray_typed_decisions", "ray")):
            raise
        return None
    return cli


def _cmd_label(argv: list[str]) -> int:
    cli = _ray_cli()
    if cli is None:
        print(f"typed-decisions label: {RAY_HINT}", file=sys.stderr)
        return 2
    return int(cli.main_label(argv) or 0)


def _cmd_serve(argv: list[str]) -> int:
    if "--ray" in argv:
        cli = _ray_cli()
        if cli is None:
            print(f"typed-decisions serve --ray: {RAY_HINT}", file=sys.stderr)
            return 2
        return int(cli.main_serve(argv) or 0)
    try:
        from .server.main import main as serve_main
    except ImportError as e:
        print(f"typed-decisions serve: the server needs its extra: pip install "
              f"'typed-decisions-runtime[server]' ({e})", file=sys.stderr)
        return 2
    return int(serve_main(argv) or 0)


def _cmd_playground(argv: list[str]) -> int:
    """``serve --open``: the server on loopback, and its playground page in a browser."""
    return _cmd_serve([*argv, "--open"] if "--open" not in argv else argv)


def _cmd_keys(argv: list[str]) -> int:
    try:
        from .server.keys import main_keys
    except ImportError as e:
        print(f"typed-decisions keys: needs the server's extra: pip install "
              f"'typed-decisions-runtime[server]' ({e})", file=sys.stderr)
        return 2
    return int(main_keys(argv) or 0)


def _cmd_eval(argv: list[str]) -> int:
    from .evaluation.cli import main_eval

    return int(main_eval(argv) or 0)


def _cmd_calibrate(argv: list[str]) -> int:
    from .evaluation.cli import main_calibrate

    return int(main_calibrate(argv) or 0)


def _cmd_fit(argv: list[str]) -> int:
    from .evaluation.fit_cli import main_fit

    return int(main_fit(argv) or 0)


def _cmd_presets(argv: list[str]) -> int:
    from .presets.cli import main_presets

    return int(main_presets(argv) or 0)


COMMANDS = {
    "models": (_cmd_models, "list, pull and locate models of the offline catalogue"),
    "export": (_cmd_export, "export a Hugging Face folder, GGUF file or catalogue model to ONNX"),
    "adopt": (_cmd_adopt, "adopt an existing ONNX decoder export (Optimum) without re-exporting"),
    "decide": (_cmd_decide, "answer a request (JSON) with an exported model"),
    "serve": (_cmd_serve, "serve /v1/systemone over HTTP (and the playground page at /playground)"),
    "label": (_cmd_label, "label every row of a table file with typed answers on a Ray cluster (Ray Data)"),
    "playground": (_cmd_playground, "serve a model and open its playground page in a browser"),
    "keys": (_cmd_keys, "issue (printed once), list and revoke the server's API keys (stored hashed)"),
    "eval": (_cmd_eval, "evaluate a question on labelled data: accuracy, NLL, ECE, risk-coverage, order bias"),
    "calibrate": (_cmd_calibrate, "fit a calibration file on a dataset's calibration split, report on test"),
    "fit": (_cmd_fit, "fit a head on labelled rows (hidden state + zero-shot log-probs) into a preset"),
    "presets": (_cmd_presets, "list, show and answer versioned question presets"),
}


DISTRIBUTION = "typed-decisions-runtime"
CLASHING = "typed-decisions"  # another author's distribution with the same import package and command


def version_line() -> str:
    """Which distribution owns the installed ``typed_decisions`` package, and where it lives; says so
    when another author's ``typed-decisions`` (the same import package and command) is installed too."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    import typed_decisions

    owners = sorted(set(packages_distributions().get("typed_decisions", [])))
    where = Path(typed_decisions.__file__).parent
    try:
        line = f"{DISTRIBUTION} {version(DISTRIBUTION)} (typed_decisions at {where})"
    except PackageNotFoundError:
        line = f"typed_decisions at {where}, not installed as {DISTRIBUTION}"
    others = [d for d in owners if d.lower().replace("_", "-") != DISTRIBUTION]
    if others:
        line += (f"\nwarning: {', '.join(others)} also installs the import package typed_decisions and this "
                 f"command; it is another project ('{CLASHING}' on the index is not this one): "
                 f"pip uninstall {' '.join(others)}, then reinstall {DISTRIBUTION}")
    return line


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(version_line())
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        lines = "\n".join(f"  {name:10s} {help_}" for name, (_, help_) in COMMANDS.items())
        print(f"usage: typed-decisions [--version] COMMAND [ARGS]\n\ncommands:\n{lines}\n\n"
              "Run 'typed-decisions COMMAND --help' for a command's options.")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\ntyped-decisions: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    func, _ = COMMANDS[argv[0]]
    try:
        return func(argv[1:])
    except TypedDecisionsError as e:
        print(f"typed-decisions {argv[0]}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
