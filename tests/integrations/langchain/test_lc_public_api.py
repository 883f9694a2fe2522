"""The public surface of langchain_typed_decisions is pinned: additions and removals are deliberate."""

from importlib.metadata import version

import langchain_typed_decisions


def test_all_is_pinned() -> None:
    assert sorted(langchain_typed_decisions.__all__) == [
        "ChoiceEdge", "ChoiceRunnable", "DecisionBackend", "DecisionRouter", "DecisionRunnable",
        "DecisionTool", "LocalBackend", "LocalDecisionModel", "NoulRunnable", "RemoteBackend",
        "RemoteDecisionModel", "RoutedResult",
        "ScoreRunnable", "__version__", "choice_edge",
    ]
    for name in langchain_typed_decisions.__all__:
        assert hasattr(langchain_typed_decisions, name)


def test_version_comes_from_the_distribution() -> None:
    assert langchain_typed_decisions.__version__ == version("typed-decisions-langchain")


def test_runtime_dependency_is_bounded() -> None:
    from importlib.metadata import requires

    reqs = requires("typed-decisions-langchain") or []
    assert any(r.replace(" ", "").startswith("typed-decisions-runtime") and "<0.2" in r for r in reqs)
