"""``/v1/decisions`` without a model: the translation in (``decisions_api``), and the server's
refusals as the ``openai`` SDK sees them, on the fake Decider (one live server for the module).

The tiny model's tests (answers equal to ``/v1/systemone``, refusals, tool calls, 429 retried) are
in tests/test_server_decisions.py."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from td_fakes import FakeDecider
from td_live import live_server
from typed_decisions.errors import EngineError, InvalidRequestError
from typed_decisions.server.decisions_api import render_input, to_system_one

openai = pytest.importorskip("openai", reason="pip install 'typed-decisions-runtime[test]'")

LIMITS = {"max_questions": 64, "max_options": 1024, "max_name_chars": 256}
PREDICATE = {"type": "predicate", "instructions": "Is it urgent?"}


def _refusal(body: dict, **limits) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as e:
        to_system_one({"model": "m", "input": "x", **body}, **{**LIMITS, **limits})
    return e.value


def test_questions_become_system_one_questions_keyed_by_position() -> None:
    t = to_system_one({"model": "m", "input": "state", "questions": [
        {"type": "choice", "name": "team", "instructions": [{"type": "input_text", "text": "Which?"},
                                                            {"type": "input_json", "data": {"k": 1}}],
         "choices": [{"value": True, "description": "yes"}, {"value": "maybe"}]},
        {"type": "score", "instructions": "How?", "levels": [{"label": "lo"}, {"label": "hi", "description": "very"}]},
        PREDICATE]}, **LIMITS)
    assert t.request == {"model": "m", "state": "state", "questions": {
        "0": {"type": "choice", "instructions": 'Which?\n{"k":1}', "criteria": {"true": "yes", "maybe": None}},
        "1": {"type": "score", "instructions": "How?", "criteria": ["lo", "hi: very"]},
        "2": {"type": "noul", "instructions": "Is it urgent?"}}}
    assert [(q.name, q.type, q.values, q.labels) for q in t.questions] == [
        ("team", "choice", (True, "maybe"), ("true", "maybe")), (None, "score", (), ("lo", "hi")),
        (None, "predicate", (), ())]


def test_limits_apply_to_the_array_as_to_system_ones_object() -> None:
    assert _refusal({"questions": [PREDICATE] * 3}, max_questions=2).loc == ("questions",)
    three = {"type": "choice", "instructions": "q", "choices": [{"value": v} for v in "abc"]}
    e = _refusal({"questions": [three]}, max_options=2)
    assert e.loc == ("questions", 0, "choices") and "--max-options" in e.msg
    e = _refusal({"questions": [{**PREDICATE, "name": "n" * 9}]}, max_name_chars=8)
    assert e.loc == ("questions", 0, "name") and "--max-name-chars" in e.msg
    many = {"type": "choice", "instructions": "q", "choices": [{"value": f"o{i}"} for i in range(256)]}
    assert "between 2 and 255" in _refusal({"questions": [many]}).msg


def test_input_items_and_their_refusals() -> None:
    assert render_input([{"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}]) \
        == "assistant: I can't."
    assert _refusal({"input": [], "questions": [PREDICATE]}).loc == ("input",)
    assert _refusal({"input": [{"role": "tool", "content": "x"}], "questions": [PREDICATE]}).loc == ("input", 0, "role")
    e = _refusal({"input": [{"type": "custom_tool_call", "call_id": "a", "name": "n", "input": "i"},
                            {"type": "function_call_output", "call_id": "a", "output": "o"}], "questions": [PREDICATE]})
    assert e.loc == ("input", 1, "call_id")  # a function output for a custom tool's call
    e = _refusal({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                         {"type": "input_image", "image_url": "data:,"}]}],
                  "questions": [PREDICATE]})
    assert e.loc == ("input", 0, "content", 1) and "text-only" in e.msg


@pytest.fixture(scope="module")
def fake_server():
    fake = FakeDecider("fake-model", max_state_chars=200)
    with live_server(fake) as url:
        yield fake, url


def _client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(api_key="any", base_url=url + "/v1", **{"max_retries": 0, **kw})


def test_an_engine_failure_is_an_internal_server_error_the_sdk_retries(fake_server) -> None:
    fake, url = fake_server
    fake.fail_with = EngineError("boom: a secret path /srv/x")
    try:
        with pytest.raises(openai.InternalServerError) as e:
            _client(url, max_retries=1).decisions.create(model="fake-model", input="x", questions=[PREDICATE])
    finally:
        fake.fail_with = None
    assert e.value.status_code == 500 and "secret" not in json.dumps(e.value.body)
    assert e.value.body["type"] == "server_error"
    metrics = httpx.get(url + "/metrics").text  # the first try and one retry, both answered 500
    assert 'typed_decisions_http_requests_total{route="/v1/decisions",status="500"} 2.0' in metrics


def test_a_prompt_over_the_context_is_a_bad_request_for_the_whole_request(fake_server) -> None:
    _, url = fake_server
    with pytest.raises(openai.BadRequestError) as e:
        _client(url).decisions.create(model="fake-model", input="x" * 300, questions=[PREDICATE])
    assert e.value.body["param"] == "questions[0]" and "too long" in e.value.body["message"]


def test_each_door_keeps_its_error_shape(fake_server) -> None:
    _, url = fake_server
    body = {"model": "fake-model", "state": "x", "input": "x", "questions": {}}
    one = httpx.post(url + "/v1/systemone", json=body)
    assert one.status_code == 422 and one.json()["detail"][0]["loc"] == ["body", "questions"]
    two = httpx.post(url + "/v1/decisions", json=body)
    assert two.status_code == 400 and two.json() == {"error": {
        "message": two.json()["error"]["message"], "type": "invalid_request_error", "param": "questions", "code": None}}
    bad_json = httpx.post(url + "/v1/decisions", content=b"{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "json_invalid"


def test_a_loading_server_is_a_503_with_retry_after() -> None:
    release = threading.Event()

    def load() -> FakeDecider:
        release.wait(30)
        return FakeDecider("fake-model")

    try:
        with live_server(load, wait_ready=False) as url:
            with pytest.raises(openai.InternalServerError) as e:
                _client(url).decisions.create(model="fake-model", input="x", questions=[PREDICATE])
            assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "5"
            assert e.value.body["code"] == "unavailable"
            release.set()
    finally:
        release.set()


@pytest.mark.parametrize("body", [
    [], "x", {"model": 1}, {"model": "fake-model", "input": {"a": 1}, "questions": [PREDICATE]},
    {"model": "fake-model", "input": [[1]], "questions": [PREDICATE]},
    {"model": "fake-model", "input": [{"type": ["x"], "role": {}}], "questions": [PREDICATE]},
    {"model": "fake-model", "input": [{"role": ["user"], "content": "x"}], "questions": [PREDICATE]},
    {"model": "fake-model", "input": [{"role": "user", "content": [{"type": {"a": 1}}, 3]}], "questions": [PREDICATE]},
    {"model": "fake-model", "input": "x", "questions": [{"type": ["choice"], "instructions": "q"}]},
    {"model": "fake-model", "input": "x", "questions": [{"type": "choice", "instructions": 3, "choices": {}}]},
    {"model": "fake-model", "input": "x", "questions": [{"type": "choice", "instructions": "q", "choices": [1, None]}]},
    {"model": "fake-model", "input": "x", "questions": [{"type": "choice", "instructions": "q",
                                                          "choices": [{"value": "a", "description": {}}, {"value": "b"}]}]},
    {"model": "fake-model", "input": "x", "questions": [{"type": "score", "instructions": "q", "levels": [{"label": 1}, 2]}]},
    {"model": "fake-model", "input": "x", "questions": [{**PREDICATE, "name": {"n": 1}}]},
    {"model": "fake-model", "input": "x", "questions": [{"type": "choice", "instructions": "q",
                                                          "choices": [{"value": " "}, {"value": "b"}]}]},
])
def test_hostile_bodies_are_bad_requests_never_a_500(fake_server, body) -> None:
    _, url = fake_server
    r = httpx.post(url + "/v1/decisions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"] and "Traceback" not in err["message"]


BOUNDARY = {"type": "choice", "name": "broken", "instructions": "Which?",
            "choices": [{"value": "<boundary>"}, {"value": "other"}]}  # the fake refuses this label


def test_a_decider_without_a_compiler_refuses_the_question_alone(fake_server) -> None:
    """Any object with ``run_many`` (here the fake: no compiler to find refusals before the call)
    refuses a question as the Decider does: that one a refusal, the others answered as without it."""
    fake, url = fake_server
    decision = _client(url).decisions.create(model="fake-model", input="an urgent ticket",
                                              questions=[BOUNDARY, PREDICATE])
    broken, urgent = decision.answers
    assert (broken.type, broken.name) == ("refusal", "broken") and urgent.type == "predicate"
    assert urgent.probability == pytest.approx(fake.probabilities_for("an urgent ticket", "1", ["yes", "no"])[0],
                                               abs=1e-12)
    only = _client(url).decisions.create(model="fake-model", input="x", questions=[BOUNDARY])
    assert [a.type for a in only.answers] == ["refusal"] and only.usage.input_tokens == 0


def test_without_a_compiler_a_batch_with_a_refusal_answers_each_job() -> None:
    """The batch's one ``run_many`` fails at the refused label; ``answer_each`` answers each job
    alone: the refusing one without its question, the other as asked. An error located outside
    a question (the context) still fails its whole request."""
    from typed_decisions.schema import DecisionRequest
    from typed_decisions.server import Job, answer_each, answer_jobs
    from typed_decisions.server.set_aside import Answered

    fake = FakeDecider("fake-model", max_state_chars=50)

    def job(state: str, questions: dict) -> Job:
        return Job(DecisionRequest.model_validate({"model": "fake-model", "state": state, "questions": questions}),
                   set_aside=True)

    noul = {"type": "noul", "instructions": "Urgent?"}
    refusing = job("ticket one", {"0": {"type": "choice", "criteria": {"<boundary>": None, "b": None}}, "1": noul})
    clean = job("ticket two", {"0": noul})
    too_long = job("x" * 60, {"0": noul})
    got = answer_each(lambda js: answer_jobs(fake, js), [refusing, clean, too_long])
    assert isinstance(got[0], Answered) and list(got[0].prepared.refused) == ["0"]
    assert "merges with the next token" in got[0].prepared.refused["0"]
    assert got[0].response.answers["1"].noul == pytest.approx(fake.probabilities_for("ticket one", "1", ["yes", "no"])[0])
    assert list(got[0].prepared.request.questions) == ["1"]
    assert isinstance(got[1], Answered) and not got[1].prepared.refused and list(got[1].response.answers) == ["0"]
    assert isinstance(got[2], InvalidRequestError) and "too long" in str(got[2])
