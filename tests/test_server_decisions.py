"""``POST /v1/decisions`` through the real ``openai`` SDK against a live server on the tiny model.

The oracle is the other door: the same request sent to ``/v1/systemone`` (written by hand here, not
by the translation under test) must give the same probabilities, to 1e-9. One shared server
(``tiny_server``, tests/conftest.py). What needs no model (translation, a failing engine, a
loading server) is in tests/test_decisions_api.py, on the fake.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest


openai = pytest.importorskip("openai", reason="pip install 'typed-decisions-runtime[test]'")

pytestmark = pytest.mark.model
KEY = {"Authorization": "Bearer sk-test"}
STATE = "I was charged twice for order 7. Please refund one of them today."


def _client(url: str, key: str = "sk-test", **kwargs) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=url + "/v1", **{"max_retries": 0, **kwargs})


def _systemone(url: str, model: str, state, questions: dict) -> dict:
    r = httpx.post(url + "/v1/systemone", json={"model": model, "state": state, "questions": questions},
                   headers=KEY, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "Is the customer asking for a refund?"},
    {"type": "choice", "instructions": [{"type": "input_text", "text": "Which team should handle this?"}],
     "choices": [{"value": "billing", "description": "Payments, refunds, invoices"},
                 {"value": "tech"}, {"value": False, "description": "Nobody"}]},
    {"type": "score", "name": "urgency", "instructions": "How urgent is it?",
     "levels": [{"label": "low"}, {"label": "medium", "description": "this week"}, {"label": "high"}]},
]
# the same three questions as System One writes them (the oracle)
SYSTEMONE = {
    "refund": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Payments, refunds, invoices", "tech": None, "false": "Nobody"}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["low", "medium: this week", "high"]},
}


def _check_same(decision, oracle: dict) -> None:
    """Answers in question order, typed values, and the oracle's probabilities to 1e-9."""
    refund, team, urgency = decision.answers
    o = oracle["answers"]
    assert (refund.type, refund.name) == ("predicate", "refund")
    assert abs(refund.probability - o["refund"]["noul"]) <= 1e-9
    assert (team.type, team.name) == ("choice", None)
    assert [p.value for p in team.probabilities] == ["billing", "tech", False]  # typed, in order
    assert type(team.probabilities[2].value) is bool
    for p, key in zip(team.probabilities, ["billing", "tech", "false"]):
        assert abs(p.probability - o["team"]["probabilities"][key]) <= 1e-9
    assert team.choice == {"billing": "billing", "tech": "tech", "false": False}[o["team"]["choice"]]
    assert abs(team.confidence - o["team"]["confidence"]) <= 1e-9
    assert (urgency.type, urgency.name) == ("score", "urgency")
    assert [(p.value, p.label) for p in urgency.probabilities] == [(0, "low"), (1, "medium"), (2, "high")]
    for p in urgency.probabilities:
        assert abs(p.probability - o["urgency"]["probabilities"][str(p.value)]) <= 1e-9
    assert abs(urgency.score - o["urgency"]["score"]) <= 1e-9
    u = decision.usage
    assert u.input_tokens == oracle["usage"]["input_tokens"] == u.total_tokens
    assert u.output_tokens == 0 and u.output_tokens_details.reasoning_tokens == 0
    assert 0 <= u.input_tokens_details.cached_tokens <= u.input_tokens


def test_every_question_type_equals_systemone(tiny_server, tiny_decider):
    client = _client(tiny_server)
    decision = client.decisions.create(model=tiny_decider.name, input=STATE, questions=QUESTIONS,
                                       prompt_cache_key="tenant-1", safety_identifier="user-9",
                                       prompt_cache_options={"mode": "implicit", "ttl": "30m"},
                                       extra_body={"some_future_field": {"x": 1}})
    assert decision.model == tiny_decider.name
    oracle = _systemone(tiny_server, tiny_decider.name, STATE, SYSTEMONE)
    _check_same(decision, oracle)
    # asked again: the state's prefix is now cached, so every prompt is spared at least the state
    again = client.decisions.create(model="jev-latest", input=STATE, questions=QUESTIONS)
    _check_same(again, oracle)
    cached = again.usage.input_tokens_details.cached_tokens
    state_tokens = len(tiny_decider.tokenizer.encode_plain(STATE))
    assert cached >= 3 * state_tokens and again.usage.input_tokens_details.cache_write_tokens == 0


def test_async_client_answers_the_same(tiny_server, tiny_decider):
    async def run():
        async with openai.AsyncOpenAI(api_key="sk-test", base_url=tiny_server + "/v1", max_retries=0) as c:
            return await asyncio.gather(*(c.decisions.create(model=tiny_decider.name, input=STATE,
                                                             questions=QUESTIONS) for _ in range(2)))

    oracle = _systemone(tiny_server, tiny_decider.name, STATE, SYSTEMONE)
    for decision in asyncio.run(run()):  # micro-batched together: each equal to the oracle
        _check_same(decision, oracle)


CONVERSATION = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "developer", "content": [{"type": "input_text", "text": "Route carefully."}]},
    {"role": "user", "content": [{"type": "input_text", "text": "Where is my refund?"},
                                 {"type": "input_json", "data": {"order": 7, "paid": True}}]},
    {"type": "message", "role": "assistant", "phase": "commentary",
     "content": [{"type": "output_text", "text": "Let me check."}]},
    {"type": "function_call", "call_id": "call_1", "name": "lookup", "namespace": "orders",
     "arguments": "{\"id\": 7}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "{\"status\": \"refunded\"}"},
    {"type": "custom_tool_call", "call_id": "call_2", "name": "grep", "input": "refund 7"},
    {"type": "custom_tool_call_output", "call_id": "call_2",
     "output": [{"type": "input_text", "text": "1 match"}]},
    {"role": "assistant", "content": "It was refunded yesterday."},
]
# the state the conversation must become (written out here: the oracle's input)
RENDERED = "\n".join([
    "system: You are a support agent.",
    "developer: Route carefully.",
    'user: Where is my refund?\n{"order":7,"paid":true}',
    "assistant: Let me check.",
    'function_call call_1: orders.lookup({"id": 7})',
    'function_call_output call_1: {"status": "refunded"}',
    "custom_tool_call call_2: grep(refund 7)",
    "custom_tool_call_output call_2: 1 match",
    "assistant: It was refunded yesterday.",
])


def test_message_input_with_tool_calls_is_the_state(tiny_server, tiny_decider):
    decision = _client(tiny_server).decisions.create(
        model=tiny_decider.name, input=CONVERSATION,
        questions=[{"type": "predicate", "instructions": "Has the agent resolved the request?"}])
    oracle = _systemone(tiny_server, tiny_decider.name, RENDERED,
                        {"q": {"type": "noul", "instructions": "Has the agent resolved the request?"}})
    (answer,) = decision.answers
    assert answer.name is None and abs(answer.probability - oracle["answers"]["q"]["noul"]) <= 1e-9
    assert decision.usage.input_tokens == oracle["usage"]["input_tokens"]


def test_a_refusal_beside_answers(tiny_server, tiny_decider):
    """A label the tokenizer cannot place after the prompt ("\\n\\nx" merges with the newline that
    ends the assistant header): that question is refused, the others answered as without it;
    /v1/systemone keeps its 422 for the same question."""
    bad = {"type": "choice", "name": "broken", "instructions": "Which?", "choices": [{"value": "\n\nx"}, {"value": "y"}]}
    decision = _client(tiny_server).decisions.create(model=tiny_decider.name, input=STATE,
                                                     questions=[QUESTIONS[0], bad, QUESTIONS[2]])
    refund, broken, urgency = decision.answers
    assert (broken.type, broken.name) == ("refusal", "broken")
    oracle = _systemone(tiny_server, tiny_decider.name, STATE,
                        {"refund": SYSTEMONE["refund"], "urgency": SYSTEMONE["urgency"]})
    assert abs(refund.probability - oracle["answers"]["refund"]["noul"]) <= 1e-9
    assert abs(urgency.score - oracle["answers"]["urgency"]["score"]) <= 1e-9
    assert decision.usage.input_tokens == oracle["usage"]["input_tokens"]
    r = httpx.post(tiny_server + "/v1/systemone", headers=KEY, json={
        "model": tiny_decider.name, "state": STATE,
        "questions": {"broken": {"type": "choice", "instructions": "Which?", "criteria": {"\n\nx": None, "y": None}}}})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "tokenizer_boundary"
    only = _client(tiny_server).decisions.create(model=tiny_decider.name, input=STATE, questions=[bad])
    assert [a.type for a in only.answers] == ["refusal"] and only.usage.input_tokens == 0


@pytest.mark.parametrize("body, param, words", [
    ({"questions": [QUESTIONS[0], QUESTIONS[0]]}, "questions[1].name", "both named 'refund'"),
    ({"questions": [{"type": "choice", "instructions": "q", "choices": [{"value": True}, {"value": "true"}]}]},
     "questions[0].choices[1].value", 'true and "true"'),
    ({"questions": [{"type": "choice", "instructions": "q", "choices": [{"value": "a"}]}]},
     "questions[0].choices", "between 2 and"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[0]", "text-only"),
    ({"questions": [{"type": "predicate", "instructions": [{"type": "input_image", "image_url": "data:,"}]}]},
     "questions[0].instructions[0]", "text-only"),
    ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}, "input[0].call_id", "no earlier"),
    ({"questions": [{"type": "box", "instructions": "where?"}]}, "questions[0].type", "'box'"),
    ({"questions": [QUESTIONS[0]] * 65}, "questions", "--max-questions"),
])
def test_invalid_requests_are_bad_request_errors_naming_the_field(tiny_server, tiny_decider, body, param, words):
    args = {"model": tiny_decider.name, "input": STATE, "questions": [QUESTIONS[0]], **body}
    with pytest.raises(openai.BadRequestError) as e:
        _client(tiny_server).decisions.create(**args)
    err = e.value.body
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error"
    assert err["param"] == param and words in err["message"], err


def test_refusals_of_the_server_are_the_sdk_error_classes(tiny_server, tiny_decider):
    q = [QUESTIONS[0]]
    with pytest.raises(openai.AuthenticationError) as e:
        _client(tiny_server, key="sk-wrong").decisions.create(model=tiny_decider.name, input=STATE, questions=q)
    assert e.value.body["type"] == "authentication_error" and "unknown API key" in e.value.message
    with pytest.raises(openai.NotFoundError) as e:
        _client(tiny_server).decisions.create(model="gpt-6-luna", input=STATE, questions=q)
    assert e.value.body["param"] == "model" and e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.APIStatusError) as e:  # over --max-body-bytes (1 MiB by default)
        _client(tiny_server).decisions.create(model=tiny_decider.name, input="x" * (1 << 20), questions=q)
    assert e.value.status_code == 413 and e.value.body["code"] == "request_too_large"
    # /v1/systemone keeps its own shape for the same refusal
    r = httpx.post(tiny_server + "/v1/systemone", json={}, headers={"Authorization": "Bearer sk-wrong"})
    assert r.status_code == 401 and r.json()["detail"]["error_type"] == "authentication_error"


def _limited(url: str) -> float:
    text = httpx.get(url + "/metrics", headers=KEY).text
    found = re.search(r'typed_decisions_key_limited_total\{key="slow",limit="key_requests_per_minute"\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_a_429_is_retried_by_the_sdk(tiny_server, tiny_decider):
    """Key ``slow`` may send one request a second: the second at once gets 429 + Retry-After, and
    the SDK waits and sends it again; both calls succeed."""
    before = _limited(tiny_server)
    client = _client(tiny_server, key="sk-slow", max_retries=3)
    for _ in range(2):
        decision = client.decisions.create(model=tiny_decider.name, input="ok", questions=[QUESTIONS[0]])
        assert decision.answers[0].type == "predicate"
    assert _limited(tiny_server) >= before + 1
    with pytest.raises(openai.RateLimitError) as e:  # and without retries, the 429 is the SDK's class
        no_retry = _client(tiny_server, key="sk-slow")
        no_retry.decisions.create(model=tiny_decider.name, input="ok", questions=[QUESTIONS[0]])
        no_retry.decisions.create(model=tiny_decider.name, input="ok", questions=[QUESTIONS[0]])
    assert e.value.response.headers["retry-after"] and e.value.body["type"] == "rate_limit_error"


def test_cached_tokens_are_per_request_inside_a_micro_batch(tiny_decider):
    """Two requests about one new state in ONE engine call (``Service.run_jobs``, as the
    micro-batcher calls it): neither counts the other's prefix as cached; a third request, after,
    finds the state in the prefix cache."""
    import uuid

    from typed_decisions.decider import parse_request
    from typed_decisions.server import Job, ServerSettings
    from typed_decisions.server.service import Service

    service = Service(tiny_decider, ServerSettings())
    state = f"Ticket {uuid.uuid4().hex}: the invoice total is wrong."
    req = parse_request({"model": tiny_decider.name, "state": state, "questions": {
        "0": {"type": "noul", "instructions": "Is it about billing?"},
        "1": {"type": "noul", "instructions": "Is it urgent?"}}})
    calls = tiny_decider.engine.stats.calls
    a, b = service.run_jobs([Job(req, set_aside=True), Job(req, set_aside=True)])
    assert tiny_decider.engine.stats.calls - calls == 1
    assert a.prepared.cached_tokens == b.prepared.cached_tokens  # batch-mates do not count
    assert a.prepared.cache_write_tokens == b.prepared.cache_write_tokens > 0
    (c,) = service.run_jobs([Job(req, set_aside=True)])
    state_tokens = len(tiny_decider.tokenizer.encode_plain(state))
    assert c.prepared.cached_tokens >= a.prepared.cached_tokens + 2 * state_tokens
    assert c.prepared.cache_write_tokens == 0
    assert c.response.answers == a.response.answers or all(
        abs(c.response.answers[k].noul - a.response.answers[k].noul) <= 1e-5 for k in ("0", "1"))
    service.executor.shutdown(wait=False)
