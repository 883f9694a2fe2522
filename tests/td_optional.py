"""Optional test dependencies (skipped locally when missing, a hard failure in CI), and the tiers.

``pytest.importorskip`` at module level silently drops every test of a module when its dependency
is missing; in CI (``CI=true``, as GitHub Actions and most runners set it) that would hide ~33
server tests behind one "skipped" line. ``require`` imports the module there instead, so a missing
dependency is a collection error naming it.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def require(module: str, install: str = "bash scripts/setup.sh") -> ModuleType:
    """``module``, imported; if it is missing: skip (locally) or fail (``CI=true``)."""
    if in_ci():
        try:
            return importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"{module} is required in CI (CI=true) but missing: {e}; install it with: "
                              f"{install}") from e
    return pytest.importorskip(module, reason=f"{module} is not installed ({install}); in CI this fails")


def fast_tier(config: pytest.Config) -> bool:
    """True when the -m expression deselects ``model`` tests (``pytest -m "not model"``).

    >>> from types import SimpleNamespace as NS
    >>> [fast_tier(NS(getoption=lambda _: e)) for e in ("not model", "", "model", "not slow")]
    [True, False, False, False]
    """
    from _pytest.mark.expression import Expression

    expr = config.getoption("markexpr") or ""
    return bool(expr) and not Expression.compile(expr).evaluate(lambda name, **_: name == "model")
