"""Opt-in: one engine, two doors, on the default model (Qwen2.5-Coder-1.5B-Instruct).

The same questions through ``/v1/decisions`` (the ``openai`` SDK) and ``/v1/systemone`` give the
same probabilities to 1e-9. Needs the default model's export in the cache (``typed-decisions
export default``; tests/export/test_export_default_slow.py makes it); skipped without it. Run with
``pytest tests/test_server_decisions_default.py --run-slow``.
"""

from __future__ import annotations

import httpx
import pytest

from td_live import live_server
from td_threads import THREADS

pytestmark = [pytest.mark.model, pytest.mark.slow]
openai = pytest.importorskip("openai", reason="pip install 'typed-decisions-runtime[test]'")

STATE = "Hi, I was billed twice this month for the same plan. Please refund the duplicate charge today."


@pytest.fixture(scope="module")
def default_url():
    from typed_decisions.decider import Decider
    from typed_decisions.errors import ArtifactError, ModelNotFoundError

    try:
        decider = Decider.load("default", threads=THREADS)
    except (ArtifactError, ModelNotFoundError) as e:
        pytest.skip(f"the default model's export is not in the cache: {e}")
    with live_server(decider, api_keys={"sk-test": "tests"}) as url:
        yield url, decider.name


def test_both_doors_give_the_same_probabilities_on_the_default_model(default_url):
    url, name = default_url
    decision = openai.OpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0, timeout=600).decisions.create(
        model=name, input=STATE, questions=[
            {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for money back?"},
            {"type": "choice", "name": "team", "instructions": "Which team should handle this?",
             "choices": [{"value": "billing", "description": "Payments and refunds"}, {"value": "technical"}]},
            {"type": "score", "name": "urgency", "instructions": "How urgent is it?",
             "levels": [{"label": "Can wait"}, {"label": "This week"}, {"label": "Today", "description": "same day"}]}])
    r = httpx.post(url + "/v1/systemone", headers={"Authorization": "Bearer sk-test"}, timeout=600, json={
        "model": name, "state": STATE, "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
            "team": {"type": "choice", "instructions": "Which team should handle this?",
                     "criteria": {"billing": "Payments and refunds", "technical": None}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["Can wait", "This week", "Today: same day"]}}})
    assert r.status_code == 200, r.text
    o = r.json()["answers"]
    refund, team, urgency = decision.answers
    assert abs(refund.probability - o["refund"]["noul"]) <= 1e-9
    assert all(abs(p.probability - o["team"]["probabilities"][p.value]) <= 1e-9 for p in team.probabilities)
    assert all(abs(p.probability - o["urgency"]["probabilities"][str(p.value)]) <= 1e-9
               for p in urgency.probabilities)
    assert decision.usage.input_tokens == r.json()["usage"]["input_tokens"]
