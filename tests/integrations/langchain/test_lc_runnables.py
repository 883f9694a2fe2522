"""DecisionRunnable and the single-question Runnables against the fake Decider: inputs, batching,
config and tracing metadata, async and streaming."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_typed_decisions import ChoiceRunnable, DecisionRunnable, NoulRunnable, ScoreRunnable
from langchain_typed_decisions._base import render_messages, split_input, to_state
from typed_decisions.schema import ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer

TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Payments", "tech": None}}
URGENT = {"type": "noul", "instructions": "Is it urgent?"}
SEVERITY = {"type": "score", "criteria": ["low", "medium", "high"]}
QUESTIONS = {"team": TEAM, "urgent": URGENT, "severity": SEVERITY}


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.ends: list[Any] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
        self.starts.append(kw)

    def on_chain_end(self, outputs: Any, **kw: Any) -> None:
        self.ends.append(outputs)


# -- input → state


def test_messages_render_as_role_lines() -> None:
    msgs = [SystemMessage("be nice"), HumanMessage("I was charged twice"), AIMessage("Order id?")]
    assert render_messages(msgs) == "system: be nice\nuser: I was charged twice\nassistant: Order id?"
    assert to_state(msgs) == render_messages(msgs)
    assert to_state(HumanMessage("hi")) == "user: hi"
    prompt = ChatPromptTemplate.from_messages([("human", "{q}")]).invoke({"q": "hello"})
    assert to_state(prompt) == "user: hello"


def test_plain_states_and_envelope() -> None:
    assert to_state({"subject": "x"}) == {"subject": "x"}
    assert to_state([1, 2]) == [1, 2]
    assert split_input({"state": "s", "questions": {"q": URGENT}}) == ("s", {"q": URGENT})
    # a dict with other keys besides "state" is an ordinary state, not an envelope
    assert split_input({"state": "CA", "city": "LA"}) == ({"state": "CA", "city": "LA"}, None)
    with pytest.raises(TypeError, match="decision state"):
        to_state(3.5)


# -- DecisionRunnable


def test_invoke_returns_the_typed_response(fake_decider) -> None:
    r = DecisionRunnable(decider=fake_decider, questions=QUESTIONS)
    out = r.invoke("billing problem")
    assert isinstance(out, DecisionResponse)
    assert isinstance(out.answers["team"], ChoiceAnswer) and out.answers["team"].choice == "billing"
    assert isinstance(out.answers["urgent"], NoulAnswer)
    assert isinstance(out.answers["severity"], ScoreAnswer)
    assert sum(out.answers["team"].probabilities.values()) == pytest.approx(1.0)
    assert r.OutputType is DecisionResponse


def test_batch_is_one_engine_call_and_equals_single_calls(fake_decider) -> None:
    r = DecisionRunnable(decider=fake_decider, questions=QUESTIONS)
    inputs = ["billing", "tech broken", [HumanMessage("tech")], {"subject": "refund"}]
    batched = r.batch(inputs)
    assert fake_decider.calls == [4]
    assert batched == [r.invoke(x) for x in inputs]
    assert asyncio.run(r.abatch(inputs)) == batched
    assert fake_decider.calls[-1] == 4  # abatch is one call too


def test_bad_input_fails_alone_with_return_exceptions(fake_decider) -> None:
    r = DecisionRunnable(decider=fake_decider, questions=QUESTIONS)
    out = r.batch(["billing", 3.5], return_exceptions=True)
    assert isinstance(out[0], DecisionResponse) and isinstance(out[1], TypeError)
    with pytest.raises(TypeError):
        r.batch(["billing", 3.5])


def test_envelope_replaces_questions(fake_decider) -> None:
    r = DecisionRunnable(decider=fake_decider, questions=QUESTIONS)
    out = r.invoke({"state": "tech", "questions": {"only": URGENT}})
    assert list(out.answers) == ["only"]


def test_async_and_stream(fake_decider) -> None:
    r = DecisionRunnable(decider=fake_decider, questions=QUESTIONS)
    assert asyncio.run(r.ainvoke("tech")) == r.invoke("tech")
    assert list(r.stream("tech")) == [r.invoke("tech")]

    async def collect() -> list[Any]:
        return [x async for x in r.astream("tech")]

    assert asyncio.run(collect()) == [r.invoke("tech")]


def test_config_callbacks_and_tracing_metadata(fake_decider) -> None:
    rec = Recorder()
    r = DecisionRunnable(decider=fake_decider, questions=QUESTIONS, name="triage")
    r.invoke("tech", {"callbacks": [rec], "metadata": {"ticket": 7}, "tags": ["t1"]})
    (start,) = rec.starts
    assert start["name"] == "triage"
    assert start["metadata"] == {"ticket": 7, "ls_provider": "typed-decisions",
                                 "ls_model_name": "fake", "ls_model_type": "decision"}
    assert "t1" in start["tags"]
    r.batch(["a", "b"], {"callbacks": [rec], "run_name": "bulk"})
    assert [s["name"] for s in rec.starts[1:]] == ["bulk", "bulk"]
    assert all(s["metadata"]["ls_provider"] == "typed-decisions" for s in rec.starts)
    assert len(rec.ends) == 3


def test_lcel_composition(fake_decider) -> None:
    team = ChoiceRunnable(decider=fake_decider, question=TEAM)
    chain = RunnableLambda(lambda t: t["text"]) | team | RunnableLambda(str.upper)
    assert chain.invoke({"text": "tech is down"}) == "TECH"


# -- single-question Runnables


def test_plain_values_and_with_answer(fake_decider) -> None:
    team = ChoiceRunnable(decider=fake_decider, question=TEAM)
    assert team.invoke("tech") == "tech" and team.OutputType is str
    full = team.with_answer()
    assert isinstance(full.invoke("tech"), ChoiceAnswer) and full.OutputType is ChoiceAnswer
    assert team.return_answer is False  # with_answer() copies

    sev = ScoreRunnable(decider=fake_decider, question=SEVERITY)
    value = sev.invoke("high")
    assert isinstance(value, float) and 0.0 <= value <= 2.0
    assert value == pytest.approx(sev.with_answer().invoke("high").score)


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.9, 1.0])
def test_noul_threshold(fake_decider, threshold: float) -> None:
    q = NoulRunnable(decider=fake_decider, question=URGENT, threshold=threshold)
    p = q.with_answer().invoke("yes please").noul
    assert q.invoke("yes please") is (p >= threshold)


def test_single_question_refuses_question_override(fake_decider) -> None:
    team = ChoiceRunnable(decider=fake_decider, question=TEAM)
    with pytest.raises(ValueError, match="one fixed question"):
        team.invoke({"state": "x", "questions": {"q": URGENT}})


def test_connection_errors_say_what_to_change(fake_decider) -> None:
    with pytest.raises(ValueError, match="exactly one of decider= .* and base_url="):
        ChoiceRunnable(question=TEAM)
    with pytest.raises(ValueError, match="exactly one"):
        ChoiceRunnable(decider=fake_decider, base_url="http://x", question=TEAM)
    with pytest.raises(ValueError, match="remote mode needs model="):
        ChoiceRunnable(base_url="http://x", question=TEAM)
    with pytest.raises(ValueError, match="remote mode"):
        ChoiceRunnable(decider=fake_decider, model="m", question=TEAM)
    with pytest.raises(ValueError, match="questions= is empty"):
        DecisionRunnable(decider=fake_decider, questions={})
    with pytest.raises(ValueError, match="sampling parameter"):
        NoulRunnable(decider=fake_decider, question={"instructions": "x", "temperature": 0.2})
