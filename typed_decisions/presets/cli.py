"""The ``typed-decisions presets`` command: list, show, hash, register and answer a preset.

Argument parsing and printing only; the work is in ``store.py`` (the shipped files and their
registry), ``preset.py`` (``content_hash``) and ``answer.py`` (``answer_preset``). Like the presets
it serves, it lives beside the pipeline, not in ``evaluation/``: it never imports the evaluation
tooling (``tests/test_layout.py``). The commands that fit a preset's calibration or head
(``calibrate --to-preset``, ``fit``) are evaluation's. ``main_presets`` takes the arguments after
``presets`` and returns the exit status (``typed_decisions.cli`` dispatches to it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..compiler import LABEL_MODES
from .answer import answer_preset
from .preset import content_hash
from .store import list_presets, load_preset, preset_file, register_preset

__all__ = ["main_presets"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="typed-decisions presets", description="Versioned question presets.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="shipped presets with their versions")
    sub.add_parser("show", help="print a preset's JSON").add_argument("name")
    sub.add_parser("hash", help="print a preset file's content hash (for the registry)").add_argument("name")
    sub.add_parser("register", help="ship a preset version: copy FILE into typed_decisions/presets/data and add its hash to the "
                                    "registry (a development step)").add_argument("file", type=Path)
    pa = sub.add_parser("answer", help="ask a preset's question about a state")
    pa.add_argument("name")
    pa.add_argument("state", nargs="?", default="-", help="the state text; '-' or nothing reads stdin")
    pa.add_argument("--model", required=True, help="exported model directory, or a catalogue name")
    pa.add_argument("--labels", choices=LABEL_MODES, default=None)
    pa.add_argument("--calibration", type=Path, default=None, help="the Decider's own calibration file (it wins "
                                                                   "over the preset's calibration)")
    pa.add_argument("--no-preset-calibration", action="store_true", help="raw probabilities (params.calibration = none)")
    pa.add_argument("--threshold", type=float, default=None)
    pa.add_argument("--threads", type=int, default=None)
    pa.add_argument("--zero-shot", action="store_true", help="the zero-shot readout even where the preset has a "
                                                             "fitted head for this model (params.fitted = none)")
    return p


def _parse(argv: list[str]) -> argparse.Namespace:
    """The arguments, with ``answer``'s state taken wherever it stands.

    ``answer NAME --model M "state"``: argparse (3.11) gives the optional positional its default
    when options follow the name, so a state after the options comes back unparsed: take it here.
    """
    p = _parser()
    args, rest = p.parse_known_args(argv)
    if rest and args.command == "answer" and args.state == "-" and len(rest) == 1 and not rest[0].startswith("-"):
        args.state, rest = rest[0], []
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def _answer(args: argparse.Namespace) -> None:
    """``presets answer``: one state, the preset's answer and action as JSON."""
    from ..decider import Decider

    state = sys.stdin.read() if args.state == "-" else args.state
    decider = Decider.from_dir(args.model, threads=args.threads, calibration=args.calibration)
    params = {k: v for k, v in (("label_mode", args.labels), ("threshold", args.threshold)) if v is not None}
    if args.no_preset_calibration:
        params["calibration"] = "none"
    if args.zero_shot:
        params["fitted"] = "none"
    preset = load_preset(args.name) if args.name.endswith(".json") else args.name  # your own file, or a name
    print(json.dumps(answer_preset(decider, preset, state, params), indent=2, ensure_ascii=False))


def main_presets(argv: list[str]) -> int:
    """``typed-decisions presets list | show NAME | hash NAME | register FILE | answer NAME --model DIR [STATE | -]``."""
    args = _parse(argv)
    if args.command == "list":
        for n in list_presets():
            pr = load_preset(n)
            print(f"{pr.name:<24} v{pr.version}  {pr.question.type:<6}  {pr.description}")
    elif args.command == "show":
        print(load_preset(args.name).model_dump_json(indent=2, exclude_none=True))
    elif args.command == "register":
        data = json.loads(args.file.read_text(encoding="utf-8"))
        digest = register_preset(data)
        print(f"registered {data['name']} v{data['version']}: {digest} ({preset_file(data['name'])})")
    elif args.command == "hash":
        path = Path(args.name) if args.name.endswith(".json") else preset_file(args.name)
        data = json.loads(path.read_text(encoding="utf-8"))
        print(json.dumps({data["name"]: {str(data["version"]): content_hash(data)}}))
    else:
        _answer(args)
    return 0
