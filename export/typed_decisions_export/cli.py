"""Command line: `typed-decisions-export SOURCE --out DIR [--quantize int8] [--name NAME] [--force]`.

The runtime's `typed-decisions export ...` forwards its arguments here (`main(argv_after_export)`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import ExportError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="typed-decisions-export",
        description="Export a causal LM to the typed_decisions ONNX directory (docs/FORMAT.md).",
    )
    parser.add_argument("source", help="Hugging Face model folder, .gguf file, or catalogue name (e.g. qwen2.5-coder-1.5b)")
    parser.add_argument("--out", required=True, type=Path, help="output directory (created; must be empty or a previous export)")
    parser.add_argument("--quantize", choices=["int8"], default=None, help="dynamic INT8 weights (checked for drift)")
    parser.add_argument("--name", default=None, help="model name recorded in the manifest")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (>= 18)")
    parser.add_argument("--force", action="store_true", help="keep INT8 even when its drift exceeds the threshold")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .export import export_model  # after argument parsing: --help must not import torch

    try:
        manifest = export_model(
            args.source,
            args.out,
            quantize=args.quantize,
            name=args.name,
            opset=args.opset,
            progress=not args.quiet,
            force=args.force,
        )
    except ExportError as e:
        print(f"typed-decisions-export: error: {e}", file=sys.stderr)
        return 1
    summary = {
        "out": str(args.out),
        "name": manifest["name"],
        "onnx_file": manifest["onnx_file"],
        "self_check_passed": manifest["self_check"]["passed"],
        "quantization": manifest["quantization"] and manifest["quantization"]["drift"],
        "export": manifest["export"],
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
