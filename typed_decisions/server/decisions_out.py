"""What ``POST /v1/decisions`` sends back: a ``Decision`` or an error, in OpenAI's shapes.

``decisions_api.py`` translates the request in; this module translates out:

- ``to_decision``: System One's answers (``schema.DecisionResponse``, keyed "0", "1", ...) as the
  SDK's ``Decision`` (``openai/types/decision.py``): answers in question order with their names
  (``null`` when unnamed), choice values with the JSON type they were sent with, score levels with
  their labels, a ``refusal`` for each question set aside (``set_aside.py``), and the full usage;
- ``error_response``: ``{"error": {"message", "type", "param", "code"}}`` with the status the
  ``openai`` SDK turns into its own classes (400 ``BadRequestError``, 401 ``AuthenticationError``,
  404 ``NotFoundError``, 413 ``APIStatusError``, 429 ``RateLimitError`` with ``Retry-After``,
  5xx ``InternalServerError``), so it retries what it retries.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import (AuthenticationError, BadBodyError, BodyTooLargeError, InvalidRequestError, Loc,
                      ModelNotFoundError, RateLimitedError, RequestTimeoutError, ServerBusyError,
                      TypedDecisionsError, UnavailableError, UnsupportedEncodingError, http_status)
from ..schema import ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer
from .decisions_api import ChoiceValue, QuestionOut, Translated

log = logging.getLogger("typed_decisions.server")


# --------------------------------------------------------------------------- the response (decision.py)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PredicateAnswer(_Out):
    type: Literal["predicate"] = "predicate"
    name: str | None
    probability: float


class ChoiceProbability(_Out):
    value: ChoiceValue
    probability: float


class ChoiceAnswerOut(_Out):
    type: Literal["choice"] = "choice"
    name: str | None
    choice: ChoiceValue
    confidence: float
    probabilities: list[ChoiceProbability]


class ScoreProbability(_Out):
    value: int
    label: str
    probability: float


class ScoreAnswerOut(_Out):
    type: Literal["score"] = "score"
    name: str | None
    score: float
    confidence: float
    probabilities: list[ScoreProbability]


class RefusalAnswer(_Out):
    """A question this model cannot answer (e.g. a label the tokenizer cannot place at the answer
    boundary); the request's other questions are answered."""

    type: Literal["refusal"] = "refusal"
    name: str | None


DecisionAnswer = Annotated[Union[PredicateAnswer, ChoiceAnswerOut, ScoreAnswerOut, RefusalAnswer],
                           Field(discriminator="type")]


class InputTokensDetails(_Out):
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(_Out):
    reasoning_tokens: int = 0


class DecisionUsage(_Out):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()
    total_tokens: int


class Decision(_Out):
    """``POST /v1/decisions``'s answer: the SDK's ``Decision``."""

    answers: list[DecisionAnswer]
    model: str
    usage: DecisionUsage


# --------------------------------------------------------------------------- errors


def param_of(loc: Loc) -> str | None:
    """A field path as OpenAI writes ``param``.

    >>> param_of(("questions", 1, "choices", 0, "value")), param_of(())
    ('questions[1].choices[0].value', None)
    """
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


# (status, type, code) per refusal class, first match in the error's MRO
_OPENAI_ERRORS: dict[type[TypedDecisionsError], tuple[str, str | None]] = {
    InvalidRequestError: ("invalid_request_error", None),
    BadBodyError: ("invalid_request_error", "invalid_body"),
    AuthenticationError: ("authentication_error", "invalid_api_key"),
    ModelNotFoundError: ("invalid_request_error", "model_not_found"),
    BodyTooLargeError: ("invalid_request_error", "request_too_large"),
    UnsupportedEncodingError: ("invalid_request_error", "unsupported_content_encoding"),
    RequestTimeoutError: ("invalid_request_error", "request_timeout"),
    UnavailableError: ("server_error", "unavailable"),
    RateLimitedError: ("rate_limit_error", "rate_limit_exceeded"),
    ServerBusyError: ("rate_limit_error", "rate_limit_exceeded"),
}


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(error: TypedDecisionsError) -> JSONResponse:
    """An error in OpenAI's shape, so the ``openai`` SDK raises its own classes: an invalid request
    is a 400 (``BadRequestError``) — never System One's 422 —, 401 ``AuthenticationError``, 404
    ``NotFoundError``, 413 / 415 / 408 ``APIStatusError``, 429 ``RateLimitError`` with
    ``Retry-After`` (the SDK waits and retries), 5xx ``InternalServerError`` (retried)."""
    status = http_status(error)
    kind = next((_OPENAI_ERRORS[c] for c in type(error).__mro__ if c in _OPENAI_ERRORS), None)
    headers: dict[str, str] = {}
    if isinstance(error, InvalidRequestError):
        status = 400
        body = error_body(error.msg if len(error.errors) == 1 else str(error), "invalid_request_error",
                          param_of(error.loc), getattr(error, "kind", None))
    elif kind is None or (status >= 500 and not isinstance(error, ServerBusyError)):
        log.error("internal error", exc_info=error)  # details to the log only
        body = error_body("internal error; the server log has the details", "server_error", None, "internal_error")
    else:
        param = "model" if isinstance(error, ModelNotFoundError) else None
        body = error_body(str(error), kind[0], param, kind[1])
    if isinstance(error, ServerBusyError):
        headers = {"retry-after": str(max(1, math.ceil(error.retry_after_s))),
                   "retry-after-ms": str(max(1, int(error.retry_after_s * 1000)))}
    if isinstance(error, RateLimitedError):
        headers["x-limit-hit"] = error.limit
    if isinstance(error, AuthenticationError):
        headers["www-authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=headers)


# --------------------------------------------------------------------------- the answers, out


def _answer(q: QuestionOut, answer: Any) -> dict[str, Any]:
    if isinstance(answer, NoulAnswer):
        return PredicateAnswer(name=q.name, probability=answer.noul).model_dump()
    if isinstance(answer, ChoiceAnswer):
        probs = [ChoiceProbability(value=v, probability=answer.probabilities[label])
                 for v, label in zip(q.values, q.labels)]
        chosen = q.values[q.labels.index(answer.choice)]
        return ChoiceAnswerOut(name=q.name, choice=chosen, confidence=answer.confidence,
                               probabilities=probs).model_dump()
    assert isinstance(answer, ScoreAnswer)
    probs_s = [ScoreProbability(value=k, label=label, probability=answer.probabilities[str(k)])
               for k, label in enumerate(q.labels)]
    return ScoreAnswerOut(name=q.name, score=answer.score, confidence=answer.confidence,
                          probabilities=probs_s).model_dump()


def to_decision(translated: Translated, model: str, response: DecisionResponse | None,
                refused: Sequence[str], *, cached_tokens: int = 0, cache_write_tokens: int = 0) -> dict[str, Any]:
    """The ``Decision`` body: one answer per question in the order sent, a refusal for each key
    in ``refused``; usage from System One's (``input_tokens``: every answered question's whole
    prompt) with the prefix cache's share of it."""
    answers = []
    for i, q in enumerate(translated.questions):
        key = str(i)
        if key in refused or response is None or key not in response.answers:
            answers.append(RefusalAnswer(name=q.name).model_dump())
        else:
            answers.append(_answer(q, response.answers[key]))
    tokens = response.usage.input_tokens if response is not None else 0
    usage = DecisionUsage(input_tokens=tokens, total_tokens=tokens,
                          input_tokens_details=InputTokensDetails(cached_tokens=min(cached_tokens, tokens),
                                                                  cache_write_tokens=cache_write_tokens))
    return {"answers": answers, "model": model, "usage": usage.model_dump()}

__all__ = ["Decision", "DecisionAnswer", "DecisionUsage", "RefusalAnswer", "error_body", "error_response",
           "param_of", "to_decision"]
