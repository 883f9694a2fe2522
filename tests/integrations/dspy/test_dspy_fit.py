"""``TypedDecisionsLM.fit`` on the tiny real model: the fitted LM answers a predictor's question as
the Decider does with the same head, the DSPy cache tells fitted answers from zero-shot ones, the
original LM is unchanged, and a remote LM is refused."""

from __future__ import annotations

from typing import Literal

import dspy
import pytest
from dspy_typed_decisions import TypedDecisionsLM

pytest.importorskip("sklearn", reason="the [fit] extra: pip install 'typed-decisions-runtime[fit]'")
pytestmark = pytest.mark.model


class TeamOnly(dspy.Signature):
    """Route a customer support ticket."""

    ticket: str = dspy.InputField()
    team: Literal["billing", "technical"] = dspy.OutputField(desc="Which team should handle the ticket?")


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
TRAIN = [dspy.Example(ticket=t, team=team).with_inputs("ticket") for t, team in LABELLED]
TICKET = "My card was billed two times for one order."


def test_a_fitted_lm_answers_as_the_decider_with_its_head(tiny_decider):
    lm = TypedDecisionsLM(tiny_decider)
    predict = dspy.Predict(TeamOnly)
    fitted = lm.fit(predict, TRAIN, components=4)
    assert len(fitted.heads) == 1 and lm.heads == {}
    (head,) = fitted.heads.values()
    assert head.classes == ["billing", "technical"] and head.fitted.rows == 8
    with dspy.context(lm=lm):
        zero = predict(ticket=TICKET)
    with dspy.context(lm=fitted):
        pred = predict(ticket=TICKET)
    entry = fitted.history[-1]
    assert not entry["cache_hit"]  # the zero-shot answer cached above is not served for the fitted LM
    request = {"model": tiny_decider.name, "state": entry["request"]["state"], "questions": entry["request"]["questions"]}
    (expected,) = tiny_decider.run_many([request], heads=[{"team": head}])
    answer = entry["response"]["answers"]["team"]
    assert answer["probabilities"] == pytest.approx(expected.answers["team"].probabilities, abs=1e-9)
    (plain,) = tiny_decider.run_many([request])  # the original LM answered zero-shot
    assert lm.history[-1]["response"]["answers"]["team"]["probabilities"] == pytest.approx(
        plain.answers["team"].probabilities, abs=1e-9)
    assert answer["probabilities"] != pytest.approx(plain.answers["team"].probabilities, abs=1e-3)
    assert pred.team in ("billing", "technical") and zero.team in ("billing", "technical")


def test_fit_needs_a_local_decider_and_labels():
    remote = TypedDecisionsLM(base_url="http://127.0.0.1:9", model="m")
    with pytest.raises(TypeError, match="needs a local decider"):
        remote.fit(dspy.Predict(TeamOnly), TRAIN)
