"""``DecisionRouter``: ask one choice question, run the Runnable mapped to the chosen option.

The rule (``pick_route``, shared with the LangGraph edge in ``graph.py``)::

    p*    = answer.probabilities[answer.choice]                 the chosen option's probability
    route = answer.choice        if p* >= threshold and answer.choice not in manual
          = None (→ fallback)    otherwise

``threshold`` means what it means everywhere in typed-decisions (presets' policies too): a bound on
the chosen option's probability p*, read from the core's answer, not re-derived — and not on
``ChoiceAnswer.confidence``, whose value depends on the number of options k (the default formula
is (k·p* − 1)/(k − 1)). ``manual`` lists options that are never acted on automatically (e.g.
"legal", "cancel_account"): they always go to the fallback — a bigger model, a human queue.

The result is a ``RoutedResult``: the routed Runnable's output plus the decision that chose it
(option, confidence, all probabilities), the route taken and whether the fallback was used, so
every automatic action can be audited. The same facts are put in the routed run's tracing metadata
(``typed_decisions_route``, ``typed_decisions_probability``, ``typed_decisions_confidence``,
``typed_decisions_fallback``) and as a ``route:<name>`` tag. Pipe ``| RunnableLambda(lambda r: r.output)`` for the bare output.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import patch_config
from pydantic import BaseModel, ConfigDict, Field, model_validator
from typed_decisions.schema import ChoiceAnswer

from .questions import ChoiceRunnable

FALLBACK = "fallback"


def chosen_probability(answer: ChoiceAnswer) -> float:
    """p*, the probability of the chosen option: what ``threshold`` is compared with."""
    return answer.probabilities[answer.choice]


def pick_route(answer: ChoiceAnswer, *, threshold: float = 0.0, manual: Iterable[str] = ()) -> str | None:
    """The option to act on automatically, or None for the fallback.

    >>> a = ChoiceAnswer(choice="billing", confidence=0.4, probabilities={"billing": 0.7, "tech": 0.3})
    >>> pick_route(a, threshold=0.7), pick_route(a, threshold=0.71), pick_route(a, manual={"billing"})
    ('billing', None, None)
    """
    if chosen_probability(answer) < threshold or answer.choice in set(manual):
        return None
    return answer.choice


def check_routes(options: list[str], routed: Iterable[str], *, has_fallback: bool,
                 threshold: float, manual: Iterable[str]) -> None:
    """Reject configurations that could pick an option with nowhere to go; messages say what to add."""
    routed, manual = set(routed), set(manual)
    if unknown := sorted((routed | manual) - set(options)):
        raise ValueError(f"routes/manual name options the question does not have: {unknown}; "
                         f"its options are {options}")
    if has_fallback:
        return
    if missing := [o for o in options if o not in routed or o in manual]:
        raise ValueError(f"options {missing} have no route (or are manual) and there is no fallback: "
                         "add a route for each, or set fallback=")
    if threshold > 0:
        raise ValueError(f"threshold={threshold} sends unsure decisions to the fallback: set fallback=")


class RoutedResult(BaseModel):
    """What a router did: the output, the decision behind it, the route taken."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    output: Any
    """The output of the routed Runnable (or of the fallback)."""
    decision: ChoiceAnswer
    """The choice answer that decided: option, confidence, probabilities."""
    route: str
    """The option whose Runnable ran, or ``"fallback"``."""
    fallback_used: bool
    reason: str | None = None
    """Why the fallback ran: ``"below_threshold"`` (p* < threshold), ``"manual_option"`` or
    ``"no_route"`` (an option without a route); None when a route ran."""


class Route(NamedTuple):
    """Where one decision goes: the route's name (an option or ``"fallback"``), its Runnable, and
    why the fallback was taken (None when a route ran)."""

    name: str
    runnable: Runnable[Any, Any]
    reason: str | None


class DecisionRouter(RunnableSerializable[Any, RoutedResult]):
    """Dispatch the input to ``routes[option]`` after one choice question; unsure or manual → fallback.

    Every route (and the fallback) receives the router's input unchanged. ``batch`` asks the
    question for all inputs in one engine call, then batches each route's inputs.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    classifier: ChoiceRunnable
    """The choice question (its options are the route names)."""
    routes: dict[str, Runnable[Any, Any]]
    """Option name → Runnable (or any callable LCEL can coerce)."""
    fallback: Runnable[Any, Any] | None = None
    """Runs when p* < threshold or the option is manual: escalation, a human queue..."""
    threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    """Minimum probability of the chosen option, p* = ``answer.probabilities[answer.choice]``,
    to act automatically (not ``ChoiceAnswer.confidence``)."""
    manual: frozenset[str] = frozenset()
    """Options never acted on automatically (always the fallback)."""

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        from langchain_core.runnables.base import coerce_to_runnable

        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("routes"), dict):
                data["routes"] = {k: coerce_to_runnable(v) for k, v in data["routes"].items()}
            if data.get("fallback") is not None:
                data["fallback"] = coerce_to_runnable(data["fallback"])
            if data.get("manual") is not None:
                data["manual"] = frozenset(data["manual"])
        return data

    @model_validator(mode="after")
    def _check(self) -> DecisionRouter:
        check_routes(self.classifier.options, self.routes, has_fallback=self.fallback is not None,
                     threshold=self.threshold, manual=self.manual)
        return self

    def _decide(self, answer: ChoiceAnswer) -> Route:
        picked = pick_route(answer, threshold=self.threshold, manual=self.manual)
        if picked is not None and picked in self.routes:
            return Route(picked, self.routes[picked], None)
        assert self.fallback is not None, "check_routes guarantees a fallback here"
        reason = "manual_option" if answer.choice in self.manual else (
            "below_threshold" if picked is None else "no_route")
        return Route(FALLBACK, self.fallback, reason)

    @staticmethod
    def _child(config: RunnableConfig, route: str, answer: ChoiceAnswer, reason: str | None
               ) -> RunnableConfig:
        meta = {"typed_decisions_route": route, "typed_decisions_choice": answer.choice,
                "typed_decisions_probability": chosen_probability(answer),
                "typed_decisions_confidence": answer.confidence,
                "typed_decisions_fallback": route == FALLBACK}
        if reason:
            meta["typed_decisions_fallback_reason"] = reason
        return {**config, "metadata": {**config.get("metadata", {}), **meta},
                "tags": [*config.get("tags", []), f"route:{route}"]}

    def _route(self, value: Any, run_manager: Any, config: RunnableConfig) -> RoutedResult:
        answer = self.classifier.with_answer().invoke(
            value, patch_config(config, callbacks=run_manager.get_child("decision")))
        route = self._decide(answer)
        child = patch_config(self._child(config, route.name, answer, route.reason),
                             callbacks=run_manager.get_child(route.name))
        return RoutedResult(output=route.runnable.invoke(value, child), decision=answer, route=route.name,
                            fallback_used=route.name == FALLBACK, reason=route.reason)

    async def _aroute(self, value: Any, run_manager: Any, config: RunnableConfig) -> RoutedResult:
        answer = await self.classifier.with_answer().ainvoke(
            value, patch_config(config, callbacks=run_manager.get_child("decision")))
        route = self._decide(answer)
        child = patch_config(self._child(config, route.name, answer, route.reason),
                             callbacks=run_manager.get_child(route.name))
        return RoutedResult(output=await route.runnable.ainvoke(value, child), decision=answer,
                            route=route.name, fallback_used=route.name == FALLBACK, reason=route.reason)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> RoutedResult:
        return self._call_with_config(self._route, input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> RoutedResult:
        return await self._acall_with_config(self._aroute, input, config, **kwargs)

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None,
              *, return_exceptions: bool = False, **kwargs: Any) -> list[RoutedResult]:
        """One engine call for all decisions, then one ``batch`` per route taken.

        (``abatch`` is LangChain's default: concurrent ``ainvoke`` calls.)"""
        return self._batch_with_config(self._route_many, inputs, config,
                                       return_exceptions=return_exceptions, **kwargs)

    def _route_many(self, inputs: list[Any], config: list[RunnableConfig]) -> list[Any]:
        answers = self.classifier.with_answer().batch(inputs, config, return_exceptions=True)
        results: list[Any] = list(answers)
        groups: dict[str, list[int]] = {}
        plans: dict[int, Route] = {}
        for i, answer in enumerate(answers):
            if not isinstance(answer, Exception):
                plans[i] = self._decide(answer)
                groups.setdefault(plans[i].name, []).append(i)
        for name, idx in groups.items():
            outs = plans[idx[0]].runnable.batch(
                [inputs[i] for i in idx],
                [self._child(config[i], name, answers[i], plans[i].reason) for i in idx],
                return_exceptions=True)
            for i, out in zip(idx, outs):
                results[i] = out if isinstance(out, Exception) else RoutedResult(
                    output=out, decision=answers[i], route=name, fallback_used=name == FALLBACK,
                    reason=plans[i].reason)
        return results


__all__ = ["DecisionRouter", "FALLBACK", "Route", "RoutedResult", "check_routes", "chosen_probability", "pick_route"]
