"""``fit`` on the LangChain Runnables (tiny real model): the fitted Runnable answers what the
Decider answers with the same heads (batch and invoke alike), the unfitted one is unchanged, a
remote Runnable is refused, and a bad example names its index."""

from __future__ import annotations

import pytest
from langchain_typed_decisions import ChoiceRunnable, DecisionRunnable, NoulRunnable

pytest.importorskip("sklearn", reason="the [fit] extra: pip install 'typed-decisions-runtime[fit]'")
pytestmark = pytest.mark.model

TEAM = {"instructions": "Which team should handle this ticket?",
        "criteria": {"billing": "payments, refunds", "tech": "bugs, errors", "sales": "buying, prices"}}
EXAMPLES = [("I was charged twice", "billing"), ("refund my payment please", "billing"),
            ("my invoice is wrong", "billing"), ("the app crashes", "tech"), ("login page is broken", "tech"),
            ("error 500 when saving", "tech"), ("I want 50 more seats", "sales"), ("your enterprise price?", "sales"),
            ("can I book a demo", "sales")]
TICKETS = ["my card was billed two times", "the export button throws an error"]


def test_a_fitted_choice_runnable_answers_as_the_decider_with_its_head(tiny_decider):
    team = ChoiceRunnable(decider=tiny_decider, question=TEAM)
    fitted = team.fit(EXAMPLES, components=8)
    head = fitted.heads["answer"]
    assert team.heads == {} and head.classes == ["billing", "tech", "sales"]
    answers = fitted.with_answer().batch(TICKETS)
    for ticket, answer in zip(TICKETS, answers):
        request = {"model": tiny_decider.name, "state": ticket, "questions": {"answer": {"type": "choice", **TEAM}}}
        (expected,) = tiny_decider.run_many([request], heads=[{"answer": head}])
        assert answer.probabilities == pytest.approx(expected.answers["answer"].probabilities, abs=1e-9)
        assert answer.calibration.startswith(f"fitted head {head.id}")
        assert fitted.invoke(ticket) == answer.choice
    assert team.with_answer().invoke(TICKETS[0]).calibration is None  # the original is unchanged


def test_fit_by_question_name_on_a_decision_runnable_and_bad_examples(tiny_decider):
    triage = DecisionRunnable(decider=tiny_decider, questions={
        "team": {"type": "choice", **TEAM}, "urgent": {"type": "noul", "instructions": "Is it urgent?"}})
    rows = [{"input": text, "answer": {"team": team}} for text, team in EXAMPLES]
    fitted = triage.fit(rows, components=8)
    assert list(fitted.heads) == ["team"]
    response = fitted.invoke(TICKETS[0])
    assert response.answers["team"].calibration.startswith("fitted head") and response.answers["urgent"].calibration is None
    with pytest.raises(ValueError, match=r"examples\[0\]: \['mood'\] are not questions"):
        triage.fit([("hi", {"mood": "0"})])
    with pytest.raises(Exception, match=r"rows\[1\].answer: 'legal' is not an option"):
        ChoiceRunnable(decider=tiny_decider, question=TEAM).fit([("a", "billing"), ("b", "legal")])


def test_fit_needs_a_local_decider():
    remote = NoulRunnable(base_url="http://127.0.0.1:9", model="m", question={"instructions": "Urgent?"})
    with pytest.raises(TypeError, match="needs a local decider"):
        remote.fit([("x", True), ("y", False)])
