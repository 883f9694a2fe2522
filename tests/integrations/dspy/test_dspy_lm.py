"""TypedDecisionsLM against the fake Decider: the decision protocol, cache, history, usage,
async, refusals, saved state and remote mode."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Literal

import dspy
import httpx
import pytest
from dspy.experimental import Choice, Noul, Score
from dspy_typed_decisions import TypedDecisionsLM


class Triage(dspy.Signature):
    """Triage a customer support ticket."""

    ticket: str = dspy.InputField()
    team: Literal["billing", "technical"] = dspy.OutputField(desc="Which team should handle it?")
    urgent: bool = dspy.OutputField(desc="Is the ticket urgent?")
    severity: Score["minor", "major", "critical"] = dspy.OutputField(desc="How severe is it?")
    channel: Choice[("email", "Reply by email"), ("phone", "Call back")] = dspy.OutputField(
        desc="How should we answer?")
    refund: Noul[(True, "A refund is requested")] = dspy.OutputField(desc="Is a refund requested?")


def test_unchanged_predict_runs_on_it(fake_decider) -> None:
    lm = TypedDecisionsLM(fake_decider)
    with dspy.context(lm=lm):
        pred = dspy.Predict(Triage)(ticket="technical problem, call me by phone")
    assert pred.team == "technical" and isinstance(pred.urgent, bool)
    assert pred.channel.value == "phone"
    assert sum(pred.channel.probabilities.values()) == pytest.approx(1.0)
    assert 0.0 <= pred.severity.value <= 2.0 and pred.severity.level in (0, 1, 2)
    assert sum(pred.severity.probabilities.values()) == pytest.approx(1.0)
    assert isinstance(pred.refund.value, bool) and 0.0 <= pred.refund.probability <= 1.0
    # one request per predictor call, all outputs as questions about one state
    (sent,) = [h["request"] for h in lm.history]
    assert set(sent["questions"]) == {"team", "urgent", "severity", "channel", "refund"}
    assert sent["questions"]["team"] == {"instructions": "Which team should handle it?",
                                         "type": "choice",
                                         "criteria": {"billing": None, "technical": None}}
    assert sent["state"]["inputs"] == {"ticket": "technical problem, call me by phone"}


def test_string_signatures(fake_decider) -> None:
    with dspy.context(lm=TypedDecisionsLM(fake_decider)):
        p = dspy.Predict("ticket -> team: Choice[('billing', 'Payments'), ('tech', 'Bugs')], urgent: bool")
        p.fields = {"team": {"instructions": "Which team?"}, "urgent": {"instructions": "Is it urgent?"}}
        pred = p(ticket="tech")
    assert pred.team.value == "tech" and isinstance(pred.urgent, bool)


def test_cache_history_usage_and_async(fake_decider) -> None:
    lm = TypedDecisionsLM(fake_decider)
    predict = dspy.Predict(Triage)
    with dspy.context(lm=lm), dspy.track_usage() as usage:
        first = predict(ticket="billing twice")
        again = predict(ticket="billing twice")
        other = asyncio.run(predict.acall(ticket="technical"))
    assert fake_decider.calls == [1, 1]                       # the repeat came from DSPy's cache
    assert [h["cache_hit"] for h in lm.history] == [False, True, False]
    assert first.toDict() == again.toDict() and other.team == "technical"
    totals = usage.get_total_tokens()
    assert totals["fake"]["prompt_tokens"] > 0 and totals["fake"]["completion_tokens"] == 0
    assert json.loads(lm.history[0]["outputs"][0])["team"]["choice"] == "billing"
    uncached = TypedDecisionsLM(fake_decider, cache=False)
    with dspy.context(lm=uncached):
        predict(ticket="billing twice")
    assert fake_decider.calls[-1] == 1 and len(fake_decider.calls) == 3


def test_generation_settings_and_text_calls_are_refused(fake_decider) -> None:
    with pytest.raises(ValueError, match=r"generation settings \['max_tokens', 'temperature'\]"):
        TypedDecisionsLM(fake_decider, temperature=0.7, max_tokens=10)
    lm = TypedDecisionsLM(fake_decider)
    with pytest.raises(NotImplementedError, match="only answers typed decisions"):
        lm("Write a poem")
    with pytest.raises(NotImplementedError, match="only answers typed decisions"):
        lm(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="generation settings"):
        lm(state="s", questions={"q": {"type": "noul", "instructions": "x"}}, n=3)
    with dspy.context(lm=lm):
        with pytest.raises(ValueError, match="temperature"):             # per-call config
            dspy.Predict(Triage, temperature=0.9)(ticket="x")
        with pytest.raises(ValueError, match="Unsupported System One output 'answer'"):
            dspy.Predict("question -> answer")(question="hi")
    with pytest.raises(TypeError, match="never samples"):
        lm.copy(rollout_id=1, temperature=1.0)


def test_copy_deepcopy_and_saved_state(fake_decider, tmp_path) -> None:
    lm = TypedDecisionsLM(fake_decider, callbacks=[])
    with dspy.context(lm=lm):
        dspy.Predict(Triage)(ticket="x")
    twin = lm.copy(cache=False)
    assert twin.backend is lm.backend and twin.history == [] and twin.cache is False
    assert copy.deepcopy(lm) is lm
    with pytest.raises(ValueError, match="in-memory Decider"):
        TypedDecisionsLM.load_state(lm.dump_state())
    remote = TypedDecisionsLM(base_url="http://td.test", model="fake", api_key="secret")
    state = remote.dump_state()
    assert "secret" not in json.dumps(state) and state["base_url"] == "http://td.test"
    assert isinstance(dspy.BaseLM.load_state(state, allow_custom_lm_class=True), TypedDecisionsLM)


def test_remote_mode_matches_local(fake_decider) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer k"
        return httpx.Response(200, json=fake_decider.run(json.loads(request.content)).model_dump(mode="json"))

    remote = TypedDecisionsLM(base_url="http://td.test", model="fake", api_key="k",
                              client_kwargs={"transport": httpx.MockTransport(handle)})
    local = TypedDecisionsLM(fake_decider, cache=False)
    predict = dspy.Predict(Triage)
    with dspy.context(lm=remote):
        r = predict(ticket="billing by email")
        a = asyncio.run(predict.acall(ticket="technical"))
    with dspy.context(lm=local):
        assert predict(ticket="billing by email").toDict() == r.toDict()
        assert predict(ticket="technical").toDict() == a.toDict()
