"""The public surface of dspy_typed_decisions is pinned."""

from importlib.metadata import requires, version

import dspy_typed_decisions


def test_all_is_pinned() -> None:
    assert sorted(dspy_typed_decisions.__all__) == [
        "DecisionBackend", "LocalBackend", "RemoteBackend", "TypedDecisionsLM", "TypedPredict",
        "__version__"]
    for name in dspy_typed_decisions.__all__:
        assert hasattr(dspy_typed_decisions, name)


def test_version_and_bounded_runtime_dependency() -> None:
    assert dspy_typed_decisions.__version__ == version("typed-decisions-dspy")
    reqs = [r.replace(" ", "") for r in requires("typed-decisions-dspy") or []]
    assert any(r.startswith("typed-decisions-runtime") and "<0.2" in r for r in reqs)
