"""``LocalDecisionModel`` / ``RemoteDecisionModel``: LangChain's ``BaseDecisionModel`` on typed-decisions,
and langchain-openai's Decisions classes pointed at our ``/v1/decisions``.

Fast tests use the fake Decider; the model tests use the tiny model and the session's one live
server (``tiny_server``). Oracle: ``Decider.run`` on the equivalent System One request.
"""

from __future__ import annotations

import asyncio
from typing import TypedDict

import pytest
from langchain_core.decisions import BaseDecisionModel, Box, Choice, ClassifierResponse, Noul, NoulCriteria, Score
from langchain_core.messages import AIMessage, HumanMessage
from langchain_typed_decisions import DecisionRunnable, LocalDecisionModel, RemoteDecisionModel, choice_edge
from langchain_typed_decisions.decision_model import to_wire

TEAM = Choice(instructions="Which team should handle this?",
              criteria={"billing": "Payments, refunds", "technical": "Bugs, crashes"})
URGENT = Noul(instructions="Is it urgent?", criteria=NoulCriteria(true="It must be handled today"))
SEVERITY = Score(instructions="How severe is it?", criteria=["low", "medium", "high"])
QUESTIONS = {"team": TEAM, "urgent": URGENT, "severity": SEVERITY}
WIRE_QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Payments, refunds", "technical": "Bugs, crashes"}},
    "urgent": {"type": "noul", "instructions": "Is it urgent?", "criteria": {"true": "It must be handled today"}},
    "severity": {"type": "score", "instructions": "How severe is it?", "criteria": ["low", "medium", "high"]},
}
STATES = ["I was charged twice for one order.", "The app crashes when I open settings.", "billing question"]


def _close(a: ClassifierResponse, b: ClassifierResponse, tol: float) -> None:
    assert a.answers.keys() == b.answers.keys()
    for name, x in a.answers.items():
        y = b.answers[name]
        assert x.type == y.type
        if x.type == "noul":
            assert abs(x.noul - y.noul) <= tol
        else:
            assert x.probabilities.keys() == y.probabilities.keys()
            assert all(abs(x.probabilities[k] - y.probabilities[k]) <= tol for k in x.probabilities)
            assert abs(x.confidence - y.confidence) <= tol


# --------------------------------------------------------------------------- fast: the fake Decider


def test_is_a_base_decision_model_with_usage_and_the_runtime_answers(fake_decider) -> None:
    model = LocalDecisionModel(decider=fake_decider)
    assert isinstance(model, BaseDecisionModel) and model.model == fake_decider.name
    out = model.invoke({"state": STATES[0], "questions": QUESTIONS})
    assert isinstance(out, ClassifierResponse) and set(out.answers) == set(QUESTIONS)
    assert out.usage is not None and out.usage["input_tokens"] > 0 and out.usage["output_tokens"] == 0
    assert out.scores["severity"].legend == {0: "low", 1: "medium", 2: "high"}
    assert set(out.scores["severity"].probabilities) == {0, 1, 2}
    # the same path as DecisionRunnable: the same numbers
    direct = DecisionRunnable(decider=fake_decider, questions=WIRE_QUESTIONS).invoke(STATES[0])
    assert out.choices["team"].probabilities == direct.answers["team"].probabilities
    assert out.nouls["urgent"].noul == direct.answers["urgent"].noul


def test_translation_keeps_messages_and_descriptions() -> None:
    wire = to_wire({"state": [HumanMessage("refund?"), AIMessage("which order?")], "questions": QUESTIONS}, "m")
    assert wire == {"model": "m", "state": "user: refund?\nassistant: which order?", "questions": WIRE_QUESTIONS}
    nested = to_wire({"state": {"ticket": HumanMessage("hi"), "n": 3}, "questions": {"u": URGENT}}, "m")
    assert nested["state"] == {"ticket": {"role": "user", "content": "hi"}, "n": 3}


def test_box_and_media_are_refused_by_name(fake_decider) -> None:
    model = LocalDecisionModel(decider=fake_decider)
    with pytest.raises(ValueError, match="question 'where' is a Box"):
        model.invoke({"state": "x", "questions": {"where": Box(instructions="Find the logo")}})
    with pytest.raises(ValueError, match=r"state\.photo: a 'image' block"):
        model.invoke({"state": {"photo": {"type": "image", "base64": "AAAA", "mime_type": "image/png"}},
                      "questions": {"u": URGENT}})
    with pytest.raises(ValueError, match="needs decider="):
        LocalDecisionModel(decider=None)


def test_batch_is_one_engine_call_and_a_bad_input_fails_alone(fake_decider) -> None:
    model = LocalDecisionModel(decider=fake_decider)
    inputs = [{"state": s, "questions": QUESTIONS} for s in STATES]
    one_by_one = [model.invoke(i) for i in inputs]
    fake_decider.calls.clear()
    batched = model.batch(inputs)
    assert fake_decider.calls == [len(STATES)]  # ONE run_many call
    for a, b in zip(batched, one_by_one):
        _close(a, b, 1e-12)
    out = model.batch([inputs[0], {"state": "x", "questions": {"b": Box(instructions="?")}}], return_exceptions=True)
    assert isinstance(out[0], ClassifierResponse) and isinstance(out[1], ValueError)
    fake_decider.calls.clear()
    for a, b in zip(asyncio.run(model.abatch(inputs)), one_by_one):
        _close(a, b, 1e-12)
    assert fake_decider.calls == [len(STATES)]


# --------------------------------------------------------------------------- the tiny model


def test_local_and_remote_equal_the_decider(tiny_decider, tiny_server) -> None:
    local = LocalDecisionModel(decider=tiny_decider)
    remote = RemoteDecisionModel(base_url=tiny_server, model=tiny_decider.name, api_key="sk-test")
    assert "sk-test" not in repr(remote)
    request = {"state": STATES[0], "questions": QUESTIONS}
    oracle = tiny_decider.run({"model": tiny_decider.name, "state": STATES[0], "questions": WIRE_QUESTIONS})
    for out in (local.invoke(request), remote.invoke(request), asyncio.run(remote.ainvoke(request))):
        assert abs(out.nouls["urgent"].noul - oracle.answers["urgent"].noul) <= 1e-9
        assert all(abs(out.choices["team"].probabilities[k] - p) <= 1e-9
                   for k, p in oracle.answers["team"].probabilities.items())
        assert abs(out.scores["severity"].score - oracle.answers["severity"].score) <= 1e-9
        assert out.usage["input_tokens"] == oracle.usage.input_tokens


def test_batch_on_the_tiny_model_is_one_engine_call_equal_to_one_by_one(tiny_decider, tiny_server) -> None:
    local = LocalDecisionModel(decider=tiny_decider)
    inputs = [{"state": s, "questions": QUESTIONS} for s in STATES]
    one_by_one = [local.invoke(i) for i in inputs]
    calls = tiny_decider.engine.stats.calls
    batched = local.batch(inputs)
    assert tiny_decider.engine.stats.calls - calls == 1
    for a, b in zip(batched, one_by_one):
        _close(a, b, 1e-5)
    remote = RemoteDecisionModel(base_url=tiny_server, model=tiny_decider.name, api_key="sk-test")
    for a, b in zip(asyncio.run(remote.abatch(inputs)), one_by_one):
        _close(a, b, 1e-5)


class Ticket(TypedDict, total=False):
    text: str
    handled_by: str


def test_a_langgraph_edge_routes_on_the_remote_model(tiny_decider, tiny_server) -> None:
    from langgraph.graph import END, START, StateGraph

    remote = RemoteDecisionModel(base_url=tiny_server, model=tiny_decider.name, api_key="sk-test")
    edge = choice_edge(remote, question=TEAM, state_key="text",
                       routes={"billing": "billing_desk", "technical": "tech_desk"})
    graph = StateGraph(Ticket)
    for node in set(edge.path_map.values()):
        graph.add_node(node, lambda s, n=node: {"handled_by": n})
        graph.add_edge(node, END)
    graph.add_conditional_edges(START, edge, edge.path_map)
    app = graph.compile()
    for state in STATES[:2]:
        answer = LocalDecisionModel(decider=tiny_decider).invoke({"state": state, "questions": {"t": TEAM}})
        expected = {"billing": "billing_desk", "technical": "tech_desk"}[answer.choices["t"].choice]
        assert app.invoke({"text": state})["handled_by"] == expected
    with pytest.raises(ValueError, match="question=Choice"):
        choice_edge(remote)


# --------------------------------------------------------------------------- langchain-openai, at our server


@pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")
def test_langchain_openai_classes_at_our_server(tiny_decider, tiny_server) -> None:
    decisions = pytest.importorskip("langchain_openai.decisions",
                                    reason="langchain-openai >= 1.8.1 (the langchain integration's test extra)")
    local = LocalDecisionModel(decider=tiny_decider)
    plain = {"team": Choice(instructions=TEAM.instructions, criteria=TEAM.criteria),
             "urgent": Noul(instructions="Is it urgent?"), "severity": SEVERITY}
    expected = local.invoke({"state": STATES[1], "questions": plain})
    classifier = decisions.OpenAIClassifier(model=tiny_decider.name, base_url=tiny_server + "/v1",
                                            api_key="sk-test", max_retries=0)
    assert isinstance(classifier, BaseDecisionModel)
    got = classifier.invoke({"state": STATES[1], "questions": plain})
    _close(got, expected, 1e-9)
    assert got.usage["input_tokens"] == expected.usage["input_tokens"]
    runnable = decisions.OpenAIDecisions(model=tiny_decider.name, base_url=tiny_server + "/v1",
                                         api_key="sk-test", max_retries=0)
    out = runnable.invoke({"input": STATES[1], "questions": {  # in the same order: the same prompts, the same rows
        "team": decisions.Choice(instructions=TEAM.instructions, choices=dict(TEAM.criteria)),
        "urgent": decisions.Predicate(instructions="Is it urgent?"),
        "severity": decisions.Score(instructions=SEVERITY.instructions, levels=["low", "medium", "high"])}})
    assert abs(out.predicates["urgent"].probability - expected.nouls["urgent"].noul) <= 1e-9
    assert out.choices["team"].choice == expected.choices["team"].choice
    assert abs(out.scores["severity"].score - expected.scores["severity"].score) <= 1e-9
