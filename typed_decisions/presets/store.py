"""Shipped presets on disk: loading, the version registry, writing a new version.

The shipped presets are JSON files in ``typed_decisions/presets/data/``. Wording is part of the
contract: answers and evaluation numbers hold for one version, so ``data/_registry.json`` records
the content hash of every released version::

    {"sms-spam": {"1": "<sha256 of the canonical JSON of version 1>"}, ...}

and ``load_preset`` refuses a shipped preset whose content does not match the hash registered for
its declared version (an edit without a version bump). Canonical JSON: ``json.dumps(obj,
sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` of the parsed file, so whitespace and
key order do not matter (``schema.json_sha256``, ``preset.content_hash``). ``typed-decisions
presets hash NAME`` prints the line to add after a bump; ``register_preset`` writes both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..fitted import FittedHead
from .preset import Preset, PresetCalibration, PresetError, content_hash

__all__ = ["REGISTRY", "list_presets", "load_preset", "preset_file", "register_preset", "with_calibration",
           "with_head"]

REGISTRY = "_registry.json"


def _folder() -> Path:
    return Path(str(resources.files("typed_decisions.presets") / "data"))


def preset_file(name: str) -> Path:
    """Where a shipped preset's JSON lives (whether or not it exists)."""
    return _folder() / f"{name}.json"


def _registry() -> dict[str, dict[str, str]]:
    return json.loads((_folder() / REGISTRY).read_text(encoding="utf-8"))


def list_presets() -> list[str]:
    """Names of the shipped presets."""
    return sorted(p.stem for p in _folder().glob("*.json") if not p.name.startswith("_"))


def _parse(data: Any, where: str) -> Preset:
    try:
        return Preset.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = ".".join(map(str, err["loc"]))
        raise PresetError(f"{where}: {loc + ': ' if loc else ''}{err['msg'].removeprefix('Value error, ')}") from None


def load_preset(name: str | Path) -> Preset:
    """A shipped preset by name (content checked against the version registry), or a JSON file path
    (not checked: your own presets are versioned by you)."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return _parse(json.loads(path.read_text(encoding="utf-8")), str(path))
    if str(name) not in list_presets():
        raise PresetError(f"unknown preset {str(name)!r}; shipped: {', '.join(list_presets())} (or give a .json path)")
    data = json.loads(preset_file(str(name)).read_text(encoding="utf-8"))
    preset = _parse(data, f"preset {name}")
    if preset.name != name:
        raise PresetError(f"preset file {name}.json declares name {preset.name!r}; they must agree")
    registered = _registry().get(preset.name, {}).get(str(preset.version))
    actual = content_hash(data)
    if registered != actual:
        raise PresetError(
            f"preset {name!r} version {preset.version} does not match the hash registered for that version "
            f"({registered or 'none registered'}; content is {actual}). Wording changes need a new version: "
            f"bump 'version' and add the hash to typed_decisions/presets/data/{REGISTRY} (typed-decisions presets hash {name})")
    return preset


def with_calibration(data: Mapping[str, Any], model: str, cal: PresetCalibration, *, bump: bool = False
                     ) -> dict[str, Any]:
    """A preset's parsed JSON with ``cal`` as its calibration for ``model`` (replacing any there),
    the version bumped by one if ``bump`` (a shipped preset's content changes); parsed to check it.

    >>> d = {"name": "x", "version": 1, "question": {"name": "q", "type": "noul",
    ...      "options": [{"name": "yes"}, {"name": "no"}]}}
    >>> out = with_calibration(d, "m", PresetCalibration(temperature=0.25, labels="names"), bump=True)
    >>> out["version"], out["calibration"]["m"]["temperature"], "calibration" in d
    (2, 0.25, False)
    """
    out = json.loads(json.dumps(dict(data)))  # a deep copy; the input stays as it was
    out["calibration"] = {**(out.get("calibration") or {}), model: cal.model_dump(mode="json", exclude_none=True)}
    if bump:
        out["version"] = int(out["version"]) + 1
    _parse(out, f"preset {out.get('name')}")
    return out


def with_head(data: Mapping[str, Any], head: FittedHead, *, bump: bool = False) -> dict[str, Any]:
    """A preset's parsed JSON with ``head`` as its fitted head for ``head.model`` (replacing any
    there), the version bumped by one if ``bump``; parsed to check it."""
    out = json.loads(json.dumps(dict(data)))
    out["fitted"] = {**(out.get("fitted") or {}), head.model: head.model_dump(mode="json", exclude_none=True)}
    if bump:
        out["version"] = int(out["version"]) + 1
    _parse(out, f"preset {out.get('name')}")
    return out


def register_preset(data: Mapping[str, Any]) -> str:
    """Ship a preset version: write ``data/NAME.json`` and add its content hash to the
    registry (other versions' entries kept). Refuses a version already registered with another
    hash (that version's numbers would silently change). Returns the hash."""
    preset = _parse(data, f"preset {data.get('name')}")
    if not preset.name or "/" in preset.name or preset.name.startswith(("_", ".")):
        raise PresetError(f"name: {preset.name!r} cannot be a preset file name")
    registry, digest = _registry(), content_hash(data)
    old = registry.get(preset.name, {}).get(str(preset.version))
    if old is not None and old != digest:
        raise PresetError(f"version: {preset.name} version {preset.version} is registered with another content "
                          f"hash ({old}); bump 'version'")
    preset_file(preset.name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    registry.setdefault(preset.name, {})[str(preset.version)] = digest
    (_folder() / REGISTRY).write_text(json.dumps(registry, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return digest
