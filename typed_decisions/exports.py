"""Where exports live, and how a model name finds its export.

Every place that takes a model (``--model`` of ``decide``/``serve``/``eval``/``calibrate``/
``presets answer``, ``Decider.load``, LangChain's and DSPy's ``decider=``) accepts either an
exported model directory or a catalogue name (``models.CATALOGUE``: a name or an alias such as
``default`` or ``tiny``), optionally with ``:int8`` for the INT8 export::

    ./exports/my-model            a directory: used as it is (must hold manifest.json)
    default, qwen2.5-coder-1.5b   <cache>/exports/qwen2.5-coder-1.5b          (float32)
    default:int8                  <cache>/exports/qwen2.5-coder-1.5b-int8     (INT8)

``<cache>`` is ``models.cache_dir()`` (``$TYPED_DECISIONS_CACHE`` or the user cache dir), the
same place ``scripts/quickstart.sh`` exports to. A name whose export is missing raises
``ArtifactError`` with the one command that makes it (``export_command``); ``ensure_export``
runs that command when the caller asked for it (``--export-if-missing``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import ArtifactError, ModelNotFoundError
from .models import ModelSpec, cache_dir, list_models, resolve

Variant = Literal["fp32", "int8"]
VARIANTS: tuple[Variant, ...] = ("fp32", "int8")
_SUFFIX = {"fp32": "", "int8": "-int8"}


def export_dir(name: str, variant: Variant = "fp32", *, cache: Path | None = None) -> Path:
    """Where the export of catalogue model ``name`` lives (whether or not it exists yet)."""
    spec = resolve(name)
    return Path(cache or cache_dir()) / "exports" / (spec.name + _SUFFIX[variant])


def export_command(name: str, variant: Variant = "fp32", *, cache: Path | None = None) -> str:
    """The shell command that makes ``export_dir(name, variant)``."""
    spec = resolve(name)
    out = export_dir(spec.name, variant, cache=cache)
    quantize = " --quantize int8" if variant == "int8" else ""
    return f"typed-decisions export {spec.name} --out {out}{quantize}"


def split_name(name: str) -> tuple[str, Variant]:
    """``"default:int8"`` → ``("default", "int8")``; ``"tiny"`` → ``("tiny", "fp32")``."""
    base, sep, variant = name.strip().partition(":")
    if not sep:
        return base, "fp32"
    if variant not in VARIANTS:
        raise ArtifactError(f"model {name!r}: unknown variant {variant!r} after ':' "
                            f"(known: {', '.join(VARIANTS)})")
    return base, variant  # type: ignore[return-value]


def _looks_like_path(text: str) -> bool:
    return any(c in text for c in "/\\") or text.startswith((".", "~"))


def locate(model: str | Path, *, cache: Path | None = None) -> Path:
    """The export directory ``model`` names: a directory as it is, else a catalogue name's export.

    Raises ``ArtifactError`` when a name has no export yet (saying how to make it) and when the
    text is neither an existing directory nor a catalogue name.
    """
    if isinstance(model, Path) or _looks_like_path(str(model)):
        return Path(model).expanduser()
    text = str(model)
    if Path(text).is_dir():
        return Path(text)
    base, variant = split_name(text)
    try:
        spec = resolve(base)
    except ModelNotFoundError as e:
        raise ArtifactError(f"{text!r} is neither an exported model directory nor a catalogue "
                            f"model: {e}") from None
    path = export_dir(spec.name, variant, cache=cache)
    if not (path / "manifest.json").is_file():
        others = [v for v in VARIANTS if v != variant
                  and (export_dir(spec.name, v, cache=cache) / "manifest.json").is_file()]
        hint = (f" (its {others[0]} export exists: use --model {spec.name}"
                f"{'' if others[0] == 'fp32' else ':' + others[0]})") if others else ""
        raise ArtifactError(f"model {text!r} ({spec.name}, {variant}) has no export at {path}{hint}. "
                            f"Make it with: {export_command(spec.name, variant, cache=cache)} "
                            "(or pass --export-if-missing)")
    return path


def ensure_export(model: str, *, cache: Path | None = None, progress: bool = True) -> Path:
    """``locate(model)``, running the export first when ``model`` is a catalogue name without one.

    Needs the export distribution (torch + transformers); pulls the GGUF if needed."""
    try:
        return locate(model, cache=cache)
    except ArtifactError:
        if _looks_like_path(model) or Path(model).is_dir():
            raise
        base, variant = split_name(model)
        resolve(base)  # an unknown name fails here, with the list of known ones
    try:
        from typed_decisions_export.cli import main as export_main
    except ImportError:
        raise ArtifactError(
            f"--export-if-missing: exporting {model!r} needs the export distribution "
            "(torch + transformers): pip install typed-decisions-export "
            "(from a checkout: pip install -e export/)") from None
    spec = resolve(base)
    out = export_dir(spec.name, variant, cache=cache)
    argv = [spec.name, "--out", str(out), *(["--quantize", "int8"] if variant == "int8" else []),
            *([] if progress else ["--quiet"])]
    if export_main(argv) != 0:
        raise ArtifactError(f"the export of {model!r} failed (see above); the command was: "
                            f"typed-decisions export {' '.join(argv)}")
    return locate(model, cache=cache)


@dataclass(frozen=True)
class ExportStatus:
    """One export directory of a catalogue model, as ``models list`` shows it."""

    variant: Variant
    path: Path
    state: Literal["missing", "present", "verified", "broken"]
    detail: str = ""


def export_status(spec: ModelSpec, variant: Variant, *, cache: Path | None = None,
                  verify: bool = False) -> ExportStatus:
    """Is the export there, and (``verify``) do its files hash to what its manifest says?"""
    from .artifacts import load_artifacts

    path = export_dir(spec.name, variant, cache=cache)
    manifest = path / "manifest.json"
    if not manifest.is_file():
        return ExportStatus(variant, path, "missing")
    try:
        files = json.loads(manifest.read_text()).get("files") or {}
        absent = sorted(rel for rel in files if not (path / rel).is_file())
        if absent:
            return ExportStatus(variant, path, "broken", f"missing {', '.join(absent)}")
        if verify:
            load_artifacts(path, verify=True)
            return ExportStatus(variant, path, "verified")
    except (ValueError, ArtifactError) as e:
        return ExportStatus(variant, path, "broken", str(e))
    return ExportStatus(variant, path, "present")


def all_export_status(*, cache: Path | None = None, verify: bool = False) -> list[tuple[ModelSpec, list[ExportStatus]]]:
    """Every catalogue model with the status of each of its export variants."""
    return [(spec, [export_status(spec, v, cache=cache, verify=verify) for v in VARIANTS])
            for spec in list_models()]


__all__ = ["ExportStatus", "VARIANTS", "Variant", "all_export_status", "ensure_export", "export_command",
           "export_dir", "export_status", "locate", "split_name"]
