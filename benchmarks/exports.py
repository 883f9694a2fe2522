"""The exports a benchmark runs: the fp32 export of a catalogue name or folder, its INT8 sibling
(made with ``quantize_export`` when missing) and the model's GGUF for llama.cpp."""

from __future__ import annotations

import json
from pathlib import Path


def resolve_model(arg: str) -> tuple[Path, Path | None, Path | None]:
    """(fp32 export dir, int8 export dir or None, GGUF or None) for a catalogue name or a directory.

    A catalogue name uses ``exports/<name>`` or the newest test fixture ``exports/test-<name>-*``,
    exporting the fp32 model if neither exists. The INT8 variant is ``<fp32 dir>-int8`` or the
    fixture's ``test-<name>-int8-<hash>``; it is made with ``quantize_export`` when missing.
    """
    from typed_decisions.models import cache_dir, model_path, resolve

    exports = cache_dir() / "exports"
    if Path(arg).expanduser().is_dir():
        fp32 = Path(arg).expanduser().resolve()
        name = json.loads((fp32 / "manifest.json").read_text())["name"].removeprefix("test-")
        try:
            spec = resolve(name)
        except Exception:
            spec = None
    else:
        spec = resolve(arg)
        fixtures = sorted((p for p in exports.glob(f"test-{spec.name}-*")
                           if "-int8-" not in p.name and (p / "manifest.json").is_file()),
                          key=lambda p: -p.stat().st_mtime)
        found = [p for p in [exports / spec.name, *fixtures] if (p / "manifest.json").is_file()]
        with_int8 = [p for p in found if _int8_of(p)]
        if found:
            fp32 = (with_int8 or found)[0]
        else:
            from typed_decisions_export import export_model

            from typed_decisions.models import pull

            fp32 = exports / spec.name
            export_model(pull(spec.name), fp32, name=spec.name)
    gguf = None
    if spec is not None:
        p = model_path(spec.name)
        gguf = p if p.is_file() else None
    int8 = _int8_of(fp32)
    return fp32, int8, gguf


def _int8_of(fp32: Path) -> Path | None:
    """The INT8 sibling of an fp32 export: ``<dir>-int8`` or, for fixtures, ``test-<name>-int8-<hash>``."""
    candidates = [fp32.parent / f"{fp32.name}-int8"]
    if fp32.name.startswith("test-"):
        stem, _, h = fp32.name.rpartition("-")
        candidates.append(fp32.parent / f"{stem}-int8-{h}")
    return next((c for c in candidates if (c / "manifest.json").is_file()), None)


def make_int8(fp32: Path) -> tuple[Path, str | None]:
    """Quantize ``fp32`` into ``<dir>-int8``; if the drift probe refuses, force it and say so."""
    from typed_decisions_export import QuantizationError, quantize_export

    out = fp32.parent / f"{fp32.name}-int8"
    try:
        quantize_export(fp32, out)
        return out, None
    except QuantizationError as e:
        quantize_export(fp32, out, force=True)
        return out, f"forced (speed only): {e}"
