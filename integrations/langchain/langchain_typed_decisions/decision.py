"""``DecisionRunnable``: fixed typed questions about the input, the full ``DecisionResponse`` out.

The single-question Runnables (``questions.py``) return plain values for LCEL; this one returns
every answer with its probabilities, for code that wants the whole picture.

>>> triage = DecisionRunnable(decider="exports/tiny", questions={                 # doctest: +SKIP
...     "team": {"type": "choice", "criteria": {"billing": "Payments", "tech": "Bugs"}},
...     "urgent": {"type": "noul", "instructions": "Is it urgent?"}})
>>> triage.invoke("I was charged twice.").answers["team"].choice                  # doctest: +SKIP
'billing'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import field_validator
from typed_decisions.schema import DecisionResponse, Question

from ._base import DecisionBase


class DecisionRunnable(DecisionBase[DecisionResponse]):
    """Ask fixed typed questions (noul / choice / score) about the input.

    Input: the state (text, dict, list, LangChain messages) or ``{"state": ..., "questions": ...}``
    to replace the questions for one call. Output: ``typed_decisions.schema.DecisionResponse``.
    ``batch`` / ``abatch`` send all inputs to the engine as one call.
    """

    questions: dict[str, Question]
    """Question name → question (a ``Noul`` / ``Choice`` / ``Score`` model or its wire dict)."""

    @field_validator("questions")
    @classmethod
    def _some(cls, questions: dict[str, Question]) -> dict[str, Question]:
        if not questions:
            raise ValueError("questions= is empty: ask at least one question")
        return questions

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return DecisionResponse

    def _questions(self, override: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(override) if override is not None else dict(self.questions)

    def _convert(self, response: DecisionResponse) -> DecisionResponse:
        return response


__all__ = ["DecisionRunnable"]
