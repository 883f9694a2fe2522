"""TypedPredict: Literal / bool / Enum outputs become choice / noul / score."""

import asyncio
import enum
from typing import Literal

import dspy
import pytest
from dspy_typed_decisions import TypedDecisionsLM, TypedPredict


class Severity(enum.Enum):
    MINOR = "minor inconvenience"
    MAJOR = "major"
    CRITICAL = "critical outage"


class Triage(dspy.Signature):
    """Triage a customer support ticket."""

    ticket: str = dspy.InputField()
    team: Literal["billing", "technical"] = dspy.OutputField(desc="Which team?")
    urgent: bool = dspy.OutputField(desc="Is it urgent?")
    severity: Severity = dspy.OutputField(desc="How severe is the problem?")


def test_plain_types_out(fake_decider) -> None:
    program = TypedPredict(Triage)
    with dspy.context(lm=TypedDecisionsLM(fake_decider)):
        pred = program(ticket="critical outage in billing")
        apred = asyncio.run(program.acall(ticket="critical outage in billing"))
    assert pred.team == "billing" and isinstance(pred.urgent, bool)
    assert pred.severity is Severity.CRITICAL
    assert apred.toDict() == pred.toDict()
    assert fake_decider.calls == [1]  # the async repeat was a cache hit


def test_enum_level_follows_the_fitted_cuts(fake_decider) -> None:
    program = TypedPredict(Triage)
    with dspy.context(lm=TypedDecisionsLM(fake_decider)):
        program.predict.fields = {"severity": {"cuts": [0.01, 0.02]}}   # anything above 0.02 → top level
        assert program(ticket="minor inconvenience").severity is Severity.CRITICAL


def test_unsupported_outputs_are_named() -> None:
    class Bad(dspy.Signature):
        ticket: str = dspy.InputField()
        summary: str = dspy.OutputField(desc="Summarize")

    with pytest.raises(TypeError, match="output 'summary' has type 'str'"):
        TypedPredict(Bad)

    class One(enum.Enum):
        ONLY = 1

    class Single(dspy.Signature):
        ticket: str = dspy.InputField()
        level: One = dspy.OutputField(desc="Level?")

    with pytest.raises(TypeError, match="at least two members"):
        TypedPredict(Single)
