"""Command line: `typed-decisions adopt SRC --out DIR [--name NAME] [--quiet]`.

The runtime's `typed-decisions adopt ...` forwards its arguments here (`main(argv_after_adopt)`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="typed-decisions adopt",
        description="Adopt an existing ONNX decoder export (Optimum's text-generation-with-past layout) "
                    "into the typed_decisions directory format (docs/FORMAT.md), without torch.",
    )
    parser.add_argument("source", type=Path, help="folder holding model.onnx, config.json and tokenizer.json")
    parser.add_argument("--out", required=True, type=Path, help="output directory (created; must be empty or a previous export)")
    parser.add_argument("--name", default=None, help="model name recorded in the manifest (default: the source folder's name)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ..errors import ExportError
    from .adopter import adopt_onnx

    try:
        manifest = adopt_onnx(args.source, args.out, name=args.name, progress=not args.quiet)
    except ExportError as e:
        print(f"typed-decisions adopt: error: {e}", file=sys.stderr)
        return 1
    summary = {
        "out": str(args.out),
        "name": manifest["name"],
        "source": {k: manifest["source"][k] for k in ("format", "path", "producer")},
        "lm_head": manifest["source"]["lm_head"],
        "self_check_passed": manifest["self_check"]["passed"],
        "export": manifest["export"],
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
