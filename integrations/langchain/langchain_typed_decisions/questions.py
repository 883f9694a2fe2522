"""One question, one plain value: ``ChoiceRunnable`` → str, ``NoulRunnable`` → bool, ``ScoreRunnable`` → float.

These compose in LCEL like any Runnable returning a plain value (``prompt | llm`` style chains,
``RunnableBranch`` conditions, LangGraph nodes). ``.with_answer()`` returns the same Runnable
answering with the full answer object (``ChoiceAnswer`` / ``NoulAnswer`` / ``ScoreAnswer``: the
probabilities, the confidence, the score legend) instead of the plain value.

- choice: the option the core picked (highest probability).
- noul: ``P(yes) >= threshold`` (default 0.5); ``P(yes)`` itself is ``.with_answer()``'s ``noul``.
- score: the expected level ``sum_i i * p_i`` (a float between 0 and the last level).

>>> urgent = NoulRunnable(decider="exports/tiny", question={"instructions": "Is it urgent?"},  # doctest: +SKIP
...                       threshold=0.7)
>>> urgent.invoke("The site is down for every customer!")                                    # doctest: +SKIP
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field
from typed_decisions.schema import (Choice, ChoiceAnswer, DecisionResponse, Noul, NoulAnswer, Score,
                                    ScoreAnswer)

from ._base import DecisionBase

class _OneQuestion(DecisionBase[Any]):
    key: str = "answer"
    """The question's name on the wire (it does not appear in the prompt)."""
    return_answer: bool = False
    """Return the full answer object instead of the plain value (see ``with_answer``)."""

    question: Any

    def with_answer(self) -> Any:
        """This Runnable, answering with the full answer object (probabilities, confidence)."""
        return self.model_copy(update={"return_answer": True})

    def _questions(self, override: Mapping[str, Any] | None) -> dict[str, Any]:
        if override is not None:
            raise ValueError(f"{type(self).__name__} asks one fixed question; pass only the state, or "
                             "use DecisionRunnable to send questions with each input")
        return {self.key: self.question}

    def _value(self, answer: Any) -> Any:
        raise NotImplementedError

    def _answers(self, answer: Any) -> dict[str, Any]:
        return {self.key: answer}

    def _convert(self, response: DecisionResponse) -> Any:
        answer = response.answers[self.key]
        return answer if self.return_answer else self._value(answer)


class ChoiceRunnable(_OneQuestion):
    """A choice question; returns the picked option's name (``.with_answer()``: ``ChoiceAnswer``)."""

    question: Choice
    """``Choice(criteria={"billing": "Payments, refunds", "tech": None}, instructions=...)`` or its dict."""

    @property
    def options(self) -> list[str]:
        return list(self.question.criteria)

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return ChoiceAnswer if self.return_answer else str

    def _value(self, answer: ChoiceAnswer) -> str:
        return answer.choice


class NoulRunnable(_OneQuestion):
    """A yes/no question; returns ``P(yes) >= threshold`` (``.with_answer()``: ``NoulAnswer``)."""

    question: Noul
    """``Noul(instructions="Is it urgent?")`` or its dict."""
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """Answer True when P(yes) is at least this."""

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return NoulAnswer if self.return_answer else bool

    def _value(self, answer: NoulAnswer) -> bool:
        return answer.noul >= self.threshold


class ScoreRunnable(_OneQuestion):
    """A score question; returns the expected level (``.with_answer()``: ``ScoreAnswer``)."""

    question: Score
    """``Score(criteria=["low", "medium", "high"], instructions=...)`` or its dict."""

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return ScoreAnswer if self.return_answer else float

    def _value(self, answer: ScoreAnswer) -> float:
        return answer.score


__all__ = ["ChoiceRunnable", "NoulRunnable", "ScoreRunnable"]
