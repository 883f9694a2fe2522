"""DecisionRouter: the threshold / manual / fallback rule, configuration checks, batching, audit data."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda
from langchain_typed_decisions import ChoiceRunnable, DecisionRouter, RoutedResult
from langchain_typed_decisions.router import pick_route
from typed_decisions.reducers import reduce_choice
from typed_decisions.schema import ChoiceAnswer

TEAM = {"instructions": "Which team?", "criteria": {"billing": None, "tech": None, "legal": None}}


def answer(p_billing: float) -> ChoiceAnswer:
    """billing chosen with probability p*, the rest split 3:2 between tech and legal; the
    confidence is the core's own (typesafe: (3 p* - 1) / 2)."""
    rest = 1.0 - p_billing
    return reduce_choice([p_billing, 0.6 * rest, 0.4 * rest], ["billing", "tech", "legal"])


def test_the_answers_used_below():
    a = answer(0.5)
    assert a.choice == "billing" and a.probabilities == pytest.approx({"billing": 0.5, "tech": 0.3, "legal": 0.2})
    assert a.confidence == pytest.approx(0.25)  # (3 * 0.5 - 1) / 2


@pytest.mark.parametrize(("p", "threshold", "manual", "expected"), [
    (0.8, 0.0, (), "billing"),
    (0.8, 0.8, (), "billing"),      # at the threshold acts
    (0.79, 0.8, (), None),          # below goes to the fallback
    (0.99, 0.0, ("billing",), None),
    (0.99, 0.5, ("legal",), "billing"),
    # threshold is compared with p*, not with the confidence: p* = 0.5 passes 0.4 although the
    # confidence is (3 * 0.5 - 1) / 2 = 0.25, and p* = 0.6 (confidence 0.4) passes 0.55.
    (0.5, 0.4, (), "billing"),
    (0.6, 0.55, (), "billing"),
    (0.5, 0.51, (), None),
])
def test_pick_route(p: float, threshold: float, manual: tuple[str, ...], expected: str | None) -> None:
    assert pick_route(answer(p), threshold=threshold, manual=manual) == expected


def routes() -> dict[str, Any]:
    return {name: RunnableLambda(lambda x, n=name: f"{n}:{x}") for name in ("billing", "tech")}


def test_routes_confident_decisions_and_escalates_the_rest(fake_decider) -> None:
    router = DecisionRouter(classifier=ChoiceRunnable(decider=fake_decider, question=TEAM),
                            routes=routes(), fallback=lambda x: f"human:{x}", threshold=0.5,
                            manual={"legal"})
    hit = router.invoke("billing twice")
    assert isinstance(hit, RoutedResult)
    assert (hit.output, hit.route, hit.fallback_used, hit.reason) == (
        "billing:billing twice", "billing", False, None)
    # The fake adds boost 3 to the logit of the option named in the state: p* ≈ e^3 / (e^3 + 2) ≈ 0.91.
    assert hit.decision.choice == "billing" and hit.decision.probabilities["billing"] >= 0.5
    assert sum(hit.decision.probabilities.values()) == pytest.approx(1.0)

    unsure = router.invoke("hello")                        # no option named: near uniform, p* ≈ 1/3
    assert unsure.decision.probabilities[unsure.decision.choice] < 0.5
    assert (unsure.route, unsure.fallback_used, unsure.reason) == ("fallback", True, "below_threshold")
    assert unsure.output == "human:hello"

    legal = router.invoke("legal threat")                  # confident, but never automatic
    assert legal.decision.choice == "legal" and legal.decision.probabilities["legal"] >= 0.5
    assert (legal.route, legal.reason) == ("fallback", "manual_option")


def test_batch_equals_invoke_and_asks_once(fake_decider) -> None:
    router = DecisionRouter(classifier=ChoiceRunnable(decider=fake_decider, question=TEAM),
                            routes=routes(), fallback=lambda x: f"human:{x}", threshold=0.5,
                            manual={"legal"})
    inputs = ["billing", "tech", "hello", "legal", "tech again"]
    batched = router.batch(inputs)
    assert fake_decider.calls == [5]
    assert batched == [router.invoke(x) for x in inputs]
    assert asyncio.run(router.abatch(inputs)) == batched


def test_route_runs_carry_the_decision_in_metadata(fake_decider) -> None:
    seen: list[dict[str, Any]] = []

    class Rec(BaseCallbackHandler):
        def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
            seen.append(kw)

    router = DecisionRouter(classifier=ChoiceRunnable(decider=fake_decider, question=TEAM),
                            routes=routes(), fallback=lambda x: x, threshold=0.5)
    result = router.invoke("tech", {"callbacks": [Rec()], "run_name": "triage"})
    assert seen[0]["name"] == "triage"
    routed = [s for s in seen if s["metadata"].get("typed_decisions_route")]
    assert routed and routed[0]["metadata"]["typed_decisions_choice"] == "tech"
    meta = routed[0]["metadata"]
    assert meta["typed_decisions_probability"] == result.decision.probabilities["tech"]
    assert meta["typed_decisions_confidence"] == result.decision.confidence
    assert "route:tech" in routed[0]["tags"]
    assert any(s["metadata"].get("ls_provider") == "typed-decisions" for s in seen)


def test_configuration_errors_name_the_fix(fake_decider) -> None:
    clf = ChoiceRunnable(decider=fake_decider, question=TEAM)
    with pytest.raises(ValueError, match=r"\['legal'\] have no route .* set fallback="):
        DecisionRouter(classifier=clf, routes=routes())
    with pytest.raises(ValueError, match="options the question does not have: \\['sales'\\]"):
        DecisionRouter(classifier=clf, routes={**routes(), "sales": lambda x: x}, fallback=lambda x: x)
    full = {**routes(), "legal": lambda x: x}
    with pytest.raises(ValueError, match="threshold=0.5 .* set fallback="):
        DecisionRouter(classifier=clf, routes=full, threshold=0.5)
    DecisionRouter(classifier=clf, routes=full)  # every option routed, no threshold: no fallback needed
