"""LangGraph: a choice question as a conditional edge, with the router's threshold/fallback rule.

    edge = choice_edge(classifier, state_key="ticket", routes={"billing": "billing_agent",
                       "tech": "tech_agent"}, fallback="human_review", threshold=0.6)
    graph.add_conditional_edges("triage", edge, edge.path_map)

The edge asks the question about ``graph_state[state_key]`` (or ``state_from(graph_state)``),
applies ``router.pick_route`` and returns a key of ``edge.path_map``: the option name, or
``"fallback"``. Edges cannot write graph state, so the decision itself is visible in the trace
(the classifier's run outputs the full ``ChoiceAnswer``); a graph that must keep the decision in
its state asks in a node (``classifier.with_answer()``) and routes with ``route_from_answer``.
A ``BaseDecisionModel`` (``LocalDecisionModel``, ``RemoteDecisionModel``, or another provider's)
routes the same way: ``choice_edge(model, question=Choice(...), ...)``.
This module needs no LangGraph import: LangGraph calls the edge like any function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.decisions import BaseDecisionModel, Choice
from langchain_core.decisions import ChoiceAnswer as LCChoiceAnswer
from langchain_core.runnables import RunnableConfig
from typed_decisions.schema import ChoiceAnswer

from .questions import ChoiceRunnable
from .router import FALLBACK, check_routes, pick_route


class ChoiceEdge:
    """A conditional-edge function: graph state → ``path_map`` key. Build with ``choice_edge``."""

    def __init__(self, classifier: ChoiceRunnable | BaseDecisionModel, *, state_key: str | None = "messages",
                 state_from: Callable[[Any], Any] | None = None,
                 routes: Mapping[str, str] | None = None, fallback: str | None = None,
                 threshold: float = 0.0, manual: Iterable[str] = (), question: Choice | None = None):
        if isinstance(classifier, BaseDecisionModel):  # a decision model asks ``question``
            if not isinstance(question, Choice):
                raise ValueError("choice_edge(model, question=Choice(...)): a decision model needs the choice "
                                 "question (langchain_core.decisions.Choice) to route on")
            options = list(question.criteria)
            self._ask: Callable[[Any, RunnableConfig], Any] = lambda state, config: classifier.invoke(
                {"state": state, "questions": {"route": question}}, config).choices["route"]
        else:
            if question is not None:
                raise ValueError("question= is for a decision model; a ChoiceRunnable asks its own question")
            options = classifier.options
            self._ask = classifier.with_answer().invoke
        routes = dict(routes) if routes is not None else {o: o for o in options}
        self.manual = frozenset(manual)
        check_routes(options, routes, has_fallback=fallback is not None, threshold=threshold,
                     manual=self.manual)
        self.classifier = classifier
        self.state_key, self.state_from = state_key, state_from
        self.threshold = threshold
        self.path_map: dict[str, str] = {o: node for o, node in routes.items()}
        if fallback is not None:
            self.path_map[FALLBACK] = fallback

    def _state(self, graph_state: Any) -> Any:
        if self.state_from is not None:
            return self.state_from(graph_state)
        if isinstance(graph_state, Mapping):
            return graph_state[self.state_key]
        return getattr(graph_state, str(self.state_key))

    def route_from_answer(self, answer: ChoiceAnswer | LCChoiceAnswer) -> str:
        """The ``path_map`` key for an answer (for graphs that asked in a node)."""
        picked = pick_route(answer, threshold=self.threshold, manual=self.manual)
        return picked if picked is not None and picked in self.path_map else FALLBACK

    def __call__(self, graph_state: Any, config: RunnableConfig) -> str:
        return self.route_from_answer(self._ask(self._state(graph_state), config))


def choice_edge(classifier: ChoiceRunnable | BaseDecisionModel, *, state_key: str | None = "messages",
                state_from: Callable[[Any], Any] | None = None,
                routes: Mapping[str, str] | None = None, fallback: str | None = None,
                threshold: float = 0.0, manual: Iterable[str] = (), question: Choice | None = None) -> ChoiceEdge:
    """A conditional edge for ``add_conditional_edges(source, edge, edge.path_map)``.

    Args:
        classifier: the choice question (a ``ChoiceRunnable``), or a decision model
            (``LocalDecisionModel``, ``RemoteDecisionModel``, any ``BaseDecisionModel``) with ``question``.
        question: with a decision model, the ``langchain_core.decisions.Choice`` to route on.
        state_key: graph-state key holding the decision state (messages are rendered
            ``role: text``); ignored when ``state_from`` is given.
        state_from: function graph state → decision state.
        routes: option → node name (default: nodes named like the options).
        fallback: node for unsure (p* < threshold) or ``manual`` decisions.
        threshold: minimum probability of the chosen option, p* = ``answer.probabilities[answer.choice]``,
            to follow it (the same meaning as ``DecisionRouter.threshold`` and presets' thresholds;
            not ``ChoiceAnswer.confidence``).
        manual: options never followed automatically.
    """
    return ChoiceEdge(classifier, state_key=state_key, state_from=state_from, routes=routes,
                      fallback=fallback, threshold=threshold, manual=manual, question=question)


__all__ = ["ChoiceEdge", "choice_edge"]
