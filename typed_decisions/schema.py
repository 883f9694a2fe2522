"""The System One wire format: requests, questions, answers and usage as pydantic models.

This module is the contract with clients (typesafe-sdk, DSPy's TypeSafe client, the HTTP server):
the request is translated once into compiled questions (``compiler.py``) and the readouts once
back into these answer models (``reducers.py``). Nothing here knows about tokens or logits.

Request::

    {"model": "jev-latest",
     "state": "I was charged twice. Please help.",           # str, object or array
     "questions": {
        "team":     {"type": "choice", "instructions": "Which team?",
                     "criteria": {"billing": "Payments, refunds", "tech": null}},
        "urgent":   {"type": "noul", "instructions": "Is it urgent?"},
        "severity": {"type": "score", "criteria": ["low", "medium", "high"]}}}

Response::

    {"model": "...", "usage": {"input_tokens": 412, "output_tokens": 0},
     "answers": {"team": {"type": "choice", "choice": "billing", "confidence": 0.83,
                          "probabilities": {"billing": 0.91, "tech": 0.09}},
                 "urgent": {"type": "noul", "noul": 0.71},
                 "severity": {"type": "score", "score": 1.2, "confidence": 0.4,
                              "legend": {"0": "low", "1": "medium", "2": "high"},
                              "probabilities": {"0": 0.2, "1": 0.4, "2": 0.4}}}}

Unknown fields are rejected everywhere (``extra="forbid"``) except the top-level ``x_*`` extension
namespace, which is accepted and not read; sampling parameters get a message of their own, because
this engine never generates text (docs/deploy.md lists these differences from the spec).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import InvalidRequestError

# A description: text, or a JSON object / array rendered as compact JSON in the prompt.
Content = Union[str, dict[str, Any], list[Any]]

SAMPLING_PARAMETERS = frozenset(
    {"temperature", "top_p", "top_k", "min_p", "max_tokens", "max_new_tokens", "seed", "n",
     "stop", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
     "do_sample", "num_beams", "stream"}
)


def render_content(value: Content) -> str:
    """Text as is; objects and arrays as compact, key-order-preserving JSON.

    >>> render_content({"subject": "Refund", "id": 7})
    '{"subject":"Refund","id":7}'
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_sha256(value: Any) -> str:
    """sha256 of a JSON value in canonical form (sorted keys, compact, UTF-8): the audit log's
    state hash and the presets' content hash.

    >>> json_sha256({"b": 1, "a": "é"}) == json_sha256({"a": "é", "b": 1})
    True
    """
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _refuse_sampling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key in SAMPLING_PARAMETERS:
                    raise ValueError(
                        f"'{key}' is a sampling parameter: this engine never generates text (it reads "
                        "label probabilities after the prompt), so sampling settings are refused, "
                        "not ignored. Remove the field."
                    )
        return data


# --------------------------------------------------------------------------- questions


class NoulCriteria(_Strict):
    """Optional descriptions of the yes (``true``) and no (``false``) outcomes."""

    true: Content | None = None
    false: Content | None = None


class Noul(_Strict):
    """A yes/no question; the answer is P(yes). Needs instructions or one described outcome."""

    type: Literal["noul"] = "noul"
    instructions: Content | None = None
    criteria: NoulCriteria | None = None

    @model_validator(mode="after")
    def _needs_something(self) -> Noul:
        described = self.criteria is not None and (
            self.criteria.true is not None or self.criteria.false is not None
        )
        if self.instructions is None and not described:
            raise ValueError("a noul question needs 'instructions' or at least one described "
                             "outcome in 'criteria' ('true' or 'false')")
        return self


class Choice(_Strict):
    """Pick one of the named options. ``criteria`` maps option name → description (or null)."""

    type: Literal["choice"] = "choice"
    instructions: Content | None = None
    criteria: dict[str, Content | None]

    @field_validator("criteria")
    @classmethod
    def _options(cls, criteria: dict[str, Content | None]) -> dict[str, Content | None]:
        if not criteria:
            raise ValueError("a choice question needs at least one option")
        for name in criteria:
            if not name.strip():
                raise ValueError(f"option name {name!r} is empty or whitespace; give each option a "
                                 "visible name")
        return criteria


class Score(_Strict):
    """Rate on ordered levels; ``criteria[i]`` describes level i (from 0)."""

    type: Literal["score"] = "score"
    instructions: Content | None = None
    criteria: list[Content] = Field(min_length=2)

    @field_validator("criteria")
    @classmethod
    def _levels(cls, levels: list[Content]) -> list[Content]:
        rendered = [render_content(level) for level in levels]
        for i, text in enumerate(rendered):
            if not text.strip():
                raise ValueError(f"level {i} is empty; describe every level")
        return levels


Question = Annotated[Union[Noul, Choice, Score], Field(discriminator="type")]


IMAGE_QUESTION_TYPES = frozenset({"box"})  # System One types that need an image: refused by name

Debias = Literal["none", "canonical", "rotate"]
Include = Literal["label_mass"]


def option_keys(q: Noul | Choice | Score) -> list[str]:
    """The option keys an answer uses: yes/no (noul), the option names (choice), the level
    numbers "0".."k-1" (score) — the keys of the answers' ``probabilities``.

    >>> option_keys(Score(criteria=["low", "high"]))
    ['0', '1']
    """
    if isinstance(q, Noul):
        return ["yes", "no"]
    if isinstance(q, Choice):
        return list(q.criteria)
    return [str(i) for i in range(len(q.criteria))]


class Example(_Strict):
    """A labelled example (few-shot): a state and the gold answers to some of the request's questions.

    ``answers`` maps a question name to one of its option keys (``option_keys``: yes/no, an option
    name, a level number as a string). ``instructions`` optionally replaces a question's
    instructions in this example only (a labelled set whose rows carry their own question).
    The compiler renders each (example, answered question) as an earlier user/assistant turn
    before the state, so examples are part of the shared prefix (docs/METHOD.md §0).
    """

    state: Content
    answers: dict[str, str] = Field(min_length=1)
    instructions: dict[str, Content] | None = None


class DecisionRequest(_Strict):
    """``POST /v1/systemone`` body. ``assets`` (images) are refused: this is a text-only engine.

    Three optional fields beyond System One's (absent: the answers are exactly System One's):
    ``debias`` ("none" | "canonical" | "rotate", default: the server's / ``Decider``'s, itself
    "none"): "canonical" shows a choice's options in an order fixed by the option set, "rotate" asks
    each question under several option orders and averages (``debias.py``); ``include``
    (["label_mass"]) adds the named extra fields to each answer (docs/METHOD.md §7);
    ``examples`` (a list of ``Example``) shows labelled examples before the state (few-shot).
    """

    model: str
    state: Content
    # minProperties in the published schema (clients, schemathesis); the validator's message names the rule
    questions: dict[str, Question] = Field(json_schema_extra={"minProperties": 1})
    assets: dict[str, Any] | None = None
    debias: Debias | None = None
    include: list[Include] | None = None
    examples: list[Example] | None = None

    @model_validator(mode="before")
    @classmethod
    def _extensions_and_image_questions(cls, data: Any) -> Any:
        """``x_*`` top-level fields are the wire format's extension namespace: accepted and not
        read (every other unknown field is refused, docs/deploy.md). A question type that needs
        an image (``box``) is refused by name, like ``assets``."""
        if not isinstance(data, dict):
            return data
        questions = data.get("questions")
        if isinstance(questions, dict):
            for name, q in questions.items():
                kind = q.get("type") if isinstance(q, dict) else None
                if isinstance(kind, str) and kind in IMAGE_QUESTION_TYPES:
                    raise InvalidRequestError(
                        f"question {name!r} is a {kind!r} question, which locates things in an image: it "
                        "needs a multimodal model; this server runs a text-only model. Ask a noul, choice or "
                        "score question about the state instead.", ("questions", name))
        return {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x_"))}

    @field_validator("questions")
    @classmethod
    def _names(cls, questions: dict[str, Any]) -> dict[str, Any]:
        if not questions:
            raise ValueError("a request needs at least one question: 'questions' maps names to noul, choice "
                             "or score questions")
        for name in questions:
            if not name:
                raise ValueError("question names must be non-empty strings")
        return questions

    @field_validator("assets")
    @classmethod
    def _no_assets(cls, assets: dict[str, Any] | None) -> None:
        if assets:
            raise ValueError("image assets need a multimodal model; this server runs a text-only "
                             "model. Send the state as text, an object or an array.")
        return None

    @model_validator(mode="after")
    def _examples_answer_the_questions(self) -> DecisionRequest:
        """Every example answer names a question of this request and one of its options.

        Raises ``InvalidRequestError`` (not a pydantic error) so that the path reaches into the
        example: ``examples.0.answers.team``.
        """
        errors: list[tuple[tuple[str | int, ...], str]] = []
        for i, ex in enumerate(self.examples or []):
            for name, answer in ex.answers.items():
                loc: tuple[str | int, ...] = ("examples", i, "answers", name)
                if name not in self.questions:
                    errors.append((loc, (f"example {i} answers {name!r}, which is not a question of this "
                                         f"request (questions: {', '.join(map(repr, self.questions))})")))
                    continue
                keys = option_keys(self.questions[name])
                if answer not in keys:
                    hint = " (score answers are level numbers)" if self.questions[name].type == "score" else ""
                    errors.append((loc, f"{answer!r} is not an option of question {name!r}; one of: "
                                        + ", ".join(map(repr, keys)) + hint))
            for name in ex.instructions or {}:
                if name not in ex.answers:
                    errors.append((("examples", i, "instructions", name),
                                   (f"example {i} gives instructions for {name!r} but no answer to it; "
                                    "instructions only reword an answered question")))
        if errors:
            raise InvalidRequestError(errors[0][1], errors[0][0], errors=errors)
        return self


# --------------------------------------------------------------------------- answers


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    calibration: str | None = Field(
        default=None, exclude=True,
        description="What calibration was applied (Python API only; never on the wire).",
    )
    label_mass: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="Share of the full-vocabulary softmax on the allowed first label tokens "
                    "(only when the request has include: [\"label_mass\"]; absent otherwise).",
    )

    @model_serializer(mode="wrap")
    def _only_asked(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Extra fields appear only when asked for: an answer without them is System One's."""
        data = handler(self)
        mass = data.pop("label_mass", None)
        if mass is not None:
            data["label_mass"] = mass
        return data


class NoulAnswer(_Answer):
    type: Literal["noul"] = "noul"
    noul: float = Field(ge=0.0, le=1.0, description="P(yes).")


class ChoiceAnswer(_Answer):
    type: Literal["choice"] = "choice"
    choice: str
    confidence: float = Field(ge=0.0, le=1.0)
    probabilities: dict[str, float]


class ScoreAnswer(_Answer):
    type: Literal["score"] = "score"
    score: float
    confidence: float = Field(ge=0.0, le=1.0)
    legend: dict[str, Content]
    probabilities: dict[str, float]


Answer = Annotated[Union[NoulAnswer, ChoiceAnswer, ScoreAnswer], Field(discriminator="type")]


class Usage(BaseModel):
    """Token counts. ``input_tokens`` is logical: the tokens of every question's full prompt."""

    model_config = ConfigDict(extra="forbid")
    input_tokens: int
    output_tokens: int = 0


class DecisionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    answers: dict[str, Answer]
    usage: Usage



def parse_request(data: DecisionRequest | Mapping[str, Any]) -> DecisionRequest:
    """Validate a wire request; errors name the field path (``questions.team.criteria``)."""
    if isinstance(data, DecisionRequest):
        return data
    try:
        return DecisionRequest.model_validate(data)
    except ValidationError as e:
        errors = []
        for err in e.errors(include_url=False):
            loc = list(err["loc"])
            # Drop the discriminator tag pydantic inserts: questions.team.choice.criteria → questions.team.criteria
            if len(loc) >= 3 and loc[0] == "questions" and loc[2] in ("noul", "choice", "score"):
                del loc[2]
            msg = err["msg"].removeprefix("Value error, ")
            errors.append((tuple(loc), msg))
        raise InvalidRequestError(errors[0][1], errors[0][0], errors=errors) from None


def parse_question(question: Question | Mapping[str, Any]) -> Question:
    """A wire question (dict) validated as one; errors name its field (``questions.q.…``)."""
    if not isinstance(question, Mapping):
        return question
    return parse_request({"model": "-", "state": "", "questions": {"q": dict(question)}}).questions["q"]


__all__ = [
    "Answer", "Choice", "ChoiceAnswer", "Content", "Debias", "DecisionRequest", "Example", "Include", "DecisionResponse", "Noul",
    "NoulAnswer", "NoulCriteria", "Question", "SAMPLING_PARAMETERS", "Score", "ScoreAnswer",
    "Usage", "json_sha256", "option_keys", "parse_question", "parse_request", "render_content",
]
