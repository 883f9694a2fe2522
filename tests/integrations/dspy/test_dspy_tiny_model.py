"""DSPy programs on the tiny real model (SmolLM2-135M): structure, Evaluate, Parallel, ReAnchor.
A weak model: the assertions are about types, sums and consistency, never answer quality."""

from typing import Literal

import dspy
import pytest
from dspy.experimental import Choice, ReAnchor, Score
from dspy_typed_decisions import TypedDecisionsLM


class Triage(dspy.Signature):
    """Triage a customer support ticket."""

    ticket: str = dspy.InputField()
    team: Literal["billing", "technical"] = dspy.OutputField(desc="Which team should handle the ticket?")
    urgent: bool = dspy.OutputField(desc="Does the customer need an answer today?")
    severity: Score["cosmetic", "degraded", "unusable"] = dspy.OutputField(desc="How badly is the customer affected?")
    channel: Choice[("email", "Reply by email"), ("phone", "Call the customer")] = dspy.OutputField(
        desc="How should support answer?")


LABELLED = [
    ("I was charged twice for my subscription this month.", "billing"),
    ("Please refund the order I cancelled yesterday.", "billing"),
    ("My invoice shows the wrong VAT number.", "billing"),
    ("Why did my card get declined when paying the annual plan?", "billing"),
    ("The app crashes every time I open the settings page.", "technical"),
    ("I get a 500 error when I try to log in.", "technical"),
    ("The export button does nothing in Firefox.", "technical"),
    ("Notifications stopped arriving on my phone after the update.", "technical"),
]
EXAMPLES = [dspy.Example(ticket=t, team=team).with_inputs("ticket") for t, team in LABELLED]


def team_is_right(example, pred, trace=None):
    return float(pred.team == example.team)


@pytest.fixture
def lm(tiny_decider):
    return TypedDecisionsLM(tiny_decider)


def test_predict_structure(lm) -> None:
    with dspy.context(lm=lm):
        pred = dspy.Predict(Triage)(ticket=LABELLED[0][0])
    assert pred.team in {"billing", "technical"} and isinstance(pred.urgent, bool)
    assert set(pred.severity.probabilities) == {0, 1, 2}
    assert sum(pred.severity.probabilities.values()) == pytest.approx(1.0, abs=1e-6)
    assert pred.severity.value == pytest.approx(sum(i * p for i, p in pred.severity.probabilities.items()))
    assert sum(pred.channel.probabilities.values()) == pytest.approx(1.0, abs=1e-6)
    assert pred.channel.value == max(pred.channel.probabilities, key=pred.channel.probabilities.get)
    assert lm.history[-1]["response"]["model"] == lm.model


class TeamOnly(dspy.Signature):
    """Route a customer support ticket."""

    ticket: str = dspy.InputField()
    team: Literal["billing", "technical"] = dspy.OutputField(desc="Which team should handle the ticket?")


def test_evaluate_parallel_and_reanchor(lm) -> None:
    """One test so the 8 engine calls are made once: Parallel, Evaluate and ReAnchor's passes
    are DSPy cache hits of the sequential calls."""
    student = dspy.Predict(TeamOnly)
    with dspy.context(lm=lm):
        sequential = [student(**ex.inputs()) for ex in EXAMPLES]
        parallel = dspy.Parallel(num_threads=2, disable_progress_bar=True)(
            [(student, ex.inputs()) for ex in EXAMPLES])
        evaluate = dspy.Evaluate(devset=EXAMPLES, metric=team_is_right, num_threads=2,
                                 display_progress=False)
        before = evaluate(student)
        optimizer = ReAnchor(metric=team_is_right, num_threads=1)
        calibrated = optimizer.compile(student, trainset=EXAMPLES)
        after = evaluate(calibrated)
    assert [p.toDict() for p in parallel] == [p.toDict() for p in sequential]
    expected = 100 * sum(team_is_right(ex, p) for ex, p in zip(EXAMPLES, sequential)) / len(EXAMPLES)
    assert before.score == pytest.approx(expected)
    report = optimizer.report
    assert report["train_score_before"] == pytest.approx(before.score / 100, abs=1e-3)
    assert report["train_score"] >= report["train_score_before"]        # not worse
    assert after.score / 100 == pytest.approx(report["train_score"], abs=1e-3)
    assert student.fields == {}  # the student is left unchanged
    assert sum(not h["cache_hit"] for h in lm.history) == len(EXAMPLES)
