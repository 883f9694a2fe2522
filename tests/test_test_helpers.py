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


def test_a_cached_fixture_is_remade_when_its_recipe_changes(tmp_path, monkeypatch):
    """tests/export_cache.py: a cached export keyed by ``inputs`` is reused while they are unchanged and
    made again when one changes (the builder tests' traced oracles)."""
    import export_cache

    import typed_decisions.models

    monkeypatch.setattr(typed_decisions.models, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(export_cache, "export_code_hash", lambda: "0" * 12)
    recipe = tmp_path / "recipe.py"
    recipe.write_text("layers = 2\n")
    built = []

    def build(work):
        work.mkdir(parents=True)
        (work / "manifest.json").write_text(recipe.read_text())
        built.append(work)

    first = export_cache.cached_export("oracle", build, inputs=(recipe,))
    assert export_cache.cached_export("oracle", build, inputs=(recipe,)) == first and len(built) == 1
    recipe.write_text("layers = 3\n")
    second = export_cache.cached_export("oracle", build, inputs=(recipe,))
    assert second != first and len(built) == 2 and (second / "manifest.json").read_text() == "layers = 3\n"
    assert export_cache.cached_export("oracle", build) not in (first, second)  # the exporter's hash alone
