"""The public surface of ray_typed_decisions is pinned; its options refuse bad combinations early
(fast tier: no cluster, no model)."""

from __future__ import annotations

from importlib.metadata import requires, version

import pytest
from pydantic import ValidationError
from td_optional import require

require("ray", "bash scripts/setup.sh (installs integrations/ray[test])")

import ray_typed_decisions  # noqa: E402
from ray_typed_decisions import RayServeOptions, build_app, routing_key  # noqa: E402

from typed_decisions.schema import DecisionRequest  # noqa: E402


def test_all_is_pinned() -> None:
    assert ray_typed_decisions.__all__ == [
        "LABEL_COLUMNS_DOC", "Labeller", "RayServeOptions", "RemoteDecider", "__version__",
        "app_builder", "build_app", "label_dataset", "output_schema", "routing_key"]
    for name in ray_typed_decisions.__all__:
        assert getattr(ray_typed_decisions, name) is not None


def test_version_and_bounded_dependencies() -> None:
    assert ray_typed_decisions.__version__ == version("typed-decisions-ray")
    reqs = [r.replace(" ", "") for r in requires("typed-decisions-ray") or []]
    assert any(r.startswith("typed-decisions-runtime") and "<0.2" in r for r in reqs)
    assert any(r.startswith("ray[") and "<2.61" in r for r in reqs)


def test_routing_key_is_the_state_not_the_questions() -> None:
    def request(state, questions):
        return DecisionRequest.model_validate({"model": "m", "state": state, "questions": questions})

    q1 = {"a": {"type": "noul", "instructions": "A?"}}
    q2 = {"b": {"type": "noul", "instructions": "B?"}}
    assert routing_key(request("same", q1)) == routing_key(request("same", q2))
    assert routing_key(request("same", q1)) != routing_key(request("other", q1))


@pytest.mark.parametrize("options, field", [
    ({"num_replicas": 2, "autoscaling_config": {"min_replicas": 1, "max_replicas": 2}}, "num_replicas"),
    ({"num_replicas": 0}, "num_replicas"),
    ({"num_cpus_per_replica": 0.5}, "num_cpus_per_replica"),
    ({"autoscaling_config": {"min_replicas": 3, "max_replicas": 2}}, "max_replicas"),
    ({"settings": {"max_batch": 0}}, "max_batch"),
    ({"replicas": 2}, "replicas"),
])
def test_bad_options_are_refused_naming_the_field(options, field) -> None:
    with pytest.raises(ValidationError) as e:
        RayServeOptions(model="/m", **options)
    assert field in str(e.value)


def test_threads_follow_the_cpus_reserved() -> None:
    assert RayServeOptions(model="/m", num_cpus_per_replica=3).threads == 3
    assert RayServeOptions(model="/m", num_cpus_per_replica=1.5).threads == 1


def test_build_app_refuses_bad_options_before_any_cluster() -> None:
    with pytest.raises(ValidationError, match="num_replicas or autoscaling_config"):
        build_app("/m", num_replicas=2, autoscaling_config={"min_replicas": 1, "max_replicas": 2})
