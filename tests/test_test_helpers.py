"""The test suite's own helpers: optional dependencies fail in CI, the tiers."""

from __future__ import annotations

import pytest
from td_optional import require


def test_require_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require("no_such_module_for_td_tests")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ImportError, match="required in CI"):
        require("no_such_module_for_td_tests")
    assert require("json").dumps([1]) == "[1]"
