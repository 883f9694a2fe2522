"""Command line: `typed-decisions-export SOURCE --out DIR [--quantize int8 [--smooth ALPHA|off]
[--keep-float N] [--weight-bits 7|8] [--down-levels 1|2]] [--builder auto|on|off]
[--hidden-layers auto|none|K,K] [--name NAME] [--force]`.

INT8 activations are always quantized per token: the per-tensor scheme is a documented negative
control for the tests and studies (export/studies/int8_variants.py), not a user choice.

The runtime's `typed-decisions export ...` forwards its arguments here (`main(argv_after_export)`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import ExportError
from .int8.options import Int8Options


def _alpha(text: str) -> float | str:
    """--smooth's value: 'off' (or 'none') -> "off", else a float in [0, 1]."""
    if text.lower() in ("off", "none"):
        return "off"
    try:
        alpha = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1] or 'off', got {text!r}") from None
    if not 0.0 <= alpha <= 1.0:
        raise argparse.ArgumentTypeError(f"alpha must be in [0, 1], got {alpha}")
    return alpha


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="typed-decisions-export",
        description="Export a causal LM to the typed_decisions ONNX directory (docs/FORMAT.md).",
    )
    parser.add_argument("source", help="Hugging Face model folder, .gguf file, or catalogue name (e.g. qwen2.5-coder-1.5b)")
    parser.add_argument("--out", required=True, type=Path, help="output directory (created; must be empty or a previous export)")
    parser.add_argument("--quantize", choices=["int8"], default=None, help="dynamic INT8 weights (checked for drift)")
    parser.add_argument(
        "--smooth", type=_alpha, default=None, metavar="ALPHA|off",
        help="INT8: SmoothQuant the MLP down_proj MatMuls with migration strength ALPHA in [0, 1] and quantize "
             "them too; 'off' keeps them float32 (default: %s)" % (Int8Options.smooth if Int8Options.smooth is not None else "off"),
    )
    parser.add_argument(
        "--keep-float", type=int, default=None, metavar="N",
        help="INT8 with --smooth: keep the N down_proj MatMuls with the largest calibration inputs float32 "
             "(default: %d)" % Int8Options.keep_float,
    )
    parser.add_argument(
        "--weight-bits", type=int, choices=[7, 8], default=None,
        help="INT8: weight levels per column, 8 (127 each side; CPUs without VNNI/AMX run a u8*u8 graph of the "
             "same weights) or 7 (63: one graph, more drift) (default: %d)" % Int8Options.weight_bits,
    )
    parser.add_argument(
        "--down-levels", type=int, choices=[1, 2], default=None,
        help="INT8 with --smooth: quantize each down_proj input as 1 or 2 per-token levels (2: ~15 bits, two "
             "integer GEMMs per down_proj, drift close to float32 down_proj; with --smooth 0.5 the fastest exact "
             "INT8 on VNNI/AMX CPUs, slower than the default without VNNI) (default: %d)" % Int8Options.down_levels,
    )
    parser.add_argument(
        "--builder", choices=["auto", "on", "off"], default="auto",
        help="who writes the backbone graph: 'on' the graph builder (config.json + safetensors streamed tensor by "
             "tensor, no torch model; an error when it cannot), 'auto' the builder where it can, else the traced "
             "export, 'off' the traced torch.onnx export (default: %(default)s)",
    )
    parser.add_argument(
        "--hidden-layers", default="auto", metavar="auto|none|K,K",
        help="graph builder: also output the residual stream after K decoder layers (hidden_state.K, "
             "transformers' hidden_states[K]) for each K; 'auto' is n//2 and 2n//3 of n layers, where mid-depth "
             "states probe best; 'none' for none (default: %(default)s)",
    )
    parser.add_argument("--name", default=None, help="model name recorded in the manifest")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (>= 18)")
    parser.add_argument("--force", action="store_true", help="keep INT8 even when its drift exceeds the threshold")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def int8_options(args: argparse.Namespace) -> Int8Options | None:
    """The INT8 options the command line names (defaults for the rest), or None when it names none."""
    given = {}
    if args.smooth is not None:
        given["smooth"] = None if args.smooth == "off" else args.smooth
    if args.keep_float is not None:
        given["keep_float"] = args.keep_float
    if args.weight_bits is not None:
        given["weight_bits"] = args.weight_bits
    if args.down_levels is not None:
        given["down_levels"] = args.down_levels
    return Int8Options(**given) if given else None


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
            int8=int8_options(args),
            builder=args.builder,
            hidden_layers=args.hidden_layers,
        )
    except ExportError as e:
        print(f"typed-decisions-export: error: {e}", file=sys.stderr)
        return 1
    summary = {
        "out": str(args.out),
        "name": manifest["name"],
        "onnx_file": manifest["onnx_file"],
        "hidden_layers": manifest.get("hidden_layers", []),
        "self_check_passed": manifest["self_check"]["passed"],
        "quantization": manifest["quantization"] and manifest["quantization"]["drift"],
        "export": manifest["export"],
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
