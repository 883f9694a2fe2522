"""choice_edge in real StateGraphs: the fallback rule with the fake Decider, a ticket-triage graph
with the tiny real model."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langchain_typed_decisions import ChoiceRunnable, choice_edge

TEAM = {"instructions": "Which team should handle this support ticket?",
        "criteria": {"billing": "Payments, charges, refunds", "technical": "Bugs, crashes, outages",
                     "legal": "Legal threats, data-protection requests"}}


class Ticket(TypedDict, total=False):
    text: str
    messages: list[Any]
    handled_by: str


def triage_graph(edge) -> Any:
    graph = StateGraph(Ticket)
    for node in set(edge.path_map.values()):
        graph.add_node(node, lambda s, n=node: {"handled_by": n})
        graph.add_edge(node, END)
    graph.add_conditional_edges(START, edge, edge.path_map)
    return graph.compile()


def test_edge_follows_the_router_rule(fake_decider) -> None:
    edge = choice_edge(ChoiceRunnable(decider=fake_decider, question=TEAM), state_key="text",
                       routes={"billing": "billing_desk", "technical": "tech_desk"},
                       fallback="human_review", threshold=0.5, manual={"legal"})
    assert edge.path_map == {"billing": "billing_desk", "technical": "tech_desk",
                             "fallback": "human_review"}
    app = triage_graph(edge)
    assert app.invoke({"text": "billing: charged twice"})["handled_by"] == "billing_desk"
    assert app.invoke({"text": "technical crash"})["handled_by"] == "tech_desk"
    assert app.invoke({"text": "legal notice"})["handled_by"] == "human_review"   # manual
    assert app.invoke({"text": "hello"})["handled_by"] == "human_review"          # unsure


def test_edge_reads_messages_and_defaults_to_option_nodes(fake_decider) -> None:
    edge = choice_edge(ChoiceRunnable(decider=fake_decider, question=TEAM))  # state_key="messages"
    assert edge.path_map == {"billing": "billing", "technical": "technical", "legal": "legal"}
    out = triage_graph(edge).invoke({"messages": [HumanMessage("a technical crash")]})
    assert out["handled_by"] == "technical"
    with pytest.raises(ValueError, match="set fallback="):
        choice_edge(ChoiceRunnable(decider=fake_decider, question=TEAM), threshold=0.3)


def test_ticket_triage_graph_on_the_tiny_model(tiny_decider) -> None:
    team = ChoiceRunnable(decider=tiny_decider, question=TEAM)
    edge = choice_edge(team, state_key="text",
                       routes={"billing": "billing_desk", "technical": "tech_desk"},
                       fallback="human_review", threshold=0.5, manual={"legal"})
    app = triage_graph(edge)
    tickets = ["I was charged twice this month, please refund me.",
               "The app crashes whenever I open the settings page.",
               "My lawyer will contact you about my personal data."]
    for text in tickets:
        answer = team.with_answer().invoke(text)
        expected = edge.path_map[edge.route_from_answer(answer)]
        assert app.invoke({"text": text})["handled_by"] == expected


def test_edge_threshold_is_on_the_chosen_probability(fake_decider) -> None:
    """p* = 0.5 with three options: confidence (3·0.5 − 1)/2 = 0.25, yet threshold 0.45 follows the
    option (the threshold bounds p*), and threshold 0.55 does not."""
    from typed_decisions.reducers import reduce_choice

    answer = reduce_choice([0.5, 0.3, 0.2], list(TEAM["criteria"]))
    assert answer.confidence == pytest.approx(0.25)
    routes = {"billing": "billing_desk", "technical": "tech_desk", "legal": "legal_desk"}
    lenient = choice_edge(ChoiceRunnable(decider=fake_decider, question=TEAM), routes=routes,
                          fallback="human_review", threshold=0.45)
    strict = choice_edge(ChoiceRunnable(decider=fake_decider, question=TEAM), routes=routes,
                         fallback="human_review", threshold=0.55)
    assert lenient.route_from_answer(answer) == list(TEAM["criteria"])[0]
    assert strict.route_from_answer(answer) == "fallback"
