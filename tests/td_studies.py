"""The study modules of export/studies/ (not a package: INT8 variants the exporter does not write),
loaded by path for the tests that use them as oracles and negative controls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

STUDIES = Path(__file__).resolve().parents[1] / "export" / "studies"


def load(name: str) -> ModuleType:
    """export/studies/<name>.py as a module (once per session)."""
    key = f"td_studies.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, STUDIES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[key] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[key]


def int8_variants() -> ModuleType:
    return load("int8_variants")
