"""The published schema of ``POST /v1/decisions``'s body: OpenAI's ``DecisionCreateParams`` as
pydantic models, for ``/openapi.json`` only.

The route does not parse with these: ``decisions_api.py`` translates the raw body by hand, so that
every refusal is OpenAI's 400 naming the field in its own words (``questions[1].choices[0].value``:
two values shown alike, an image for a text-only model, a tool output without its call). These
models say what a client may send, as the ``openai`` package's ``types/decision_create_params.py``
(3.63) and the param types it imports write it; tests/test_decisions_schema.py compares this
schema, field by field, with the one pydantic derives from that package's TypedDicts (the core
never imports ``openai``). Where this server reads a field differently, the field's description
says so; the shapes stay OpenAI's. Bounds only in the spec's prose become schema bounds (2-255
choices, at least one question), and so do this server's own (an input array and a score's levels
are refused empty / below two); ``--max-questions`` and ``--max-options`` are the operator's, unwritten.

Names start with ``Decision`` (``Choice``, ``Score`` are System One's in the same schema).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from .decisions_api import MAX_CHOICES, ChoiceValue

# A field the SDK may leave out but never sends as null (OpenAI's ``name: str`` in a TypedDict
# with total=False): optional in the schema, not nullable.
Omittable = Union[str, SkipJsonSchema[None]]
Status = Optional[Literal["in_progress", "completed", "incomplete"]]
Detail = Optional[Literal["low", "high", "auto", "original"]]
NOT_READ = "accepted and not read"
TEXT_ONLY = "refused with a 400 naming the part: this server runs a text-only model"


class DecisionPromptCacheBreakpoint(BaseModel):
    """Marks the end of a reusable prompt prefix (accepted and not read: every request's state is
    a cache point of this server's prefix cache)."""

    mode: Literal["explicit"]


# --------------------------------------------------------------------------- content parts


class DecisionInputText(BaseModel):
    text: str
    type: Literal["input_text"]
    prompt_cache_breakpoint: Optional[DecisionPromptCacheBreakpoint] = Field(None, description=NOT_READ)


class DecisionInputImage(BaseModel):
    """An image part: part of OpenAI's API, refused here (a text-only model)."""

    image_url: str = Field(description=TEXT_ONLY)
    type: Literal["input_image"]
    detail: Detail = None
    prompt_cache_breakpoint: Optional[DecisionPromptCacheBreakpoint] = None


class DecisionInputJSON(BaseModel):
    """A JSON object or an array of objects, shown to the model as compact JSON text."""

    data: Union[dict[str, Any], list[dict[str, Any]]]
    type: Literal["input_json"]


class DecisionQuestionText(BaseModel):
    text: str
    type: Literal["input_text"]


class DecisionQuestionImage(BaseModel):
    """An image in a question's instructions: refused here, as in the input."""

    image_url: str = Field(description=TEXT_ONLY)
    type: Literal["input_image"]
    detail: Detail = None


class DecisionOutputText(BaseModel):
    text: str
    type: Literal["output_text"]


class DecisionRefusalPart(BaseModel):
    refusal: str
    type: Literal["refusal"]


Instructions = Union[str, list[Union[DecisionQuestionText, DecisionQuestionImage, DecisionInputJSON]]]
ToolOutput = Union[str, list[Union[DecisionInputText, DecisionInputImage]]]


# --------------------------------------------------------------------------- input items


class DecisionUserMessage(BaseModel):
    """Shown as one ``user: text`` line (parts joined by newlines)."""

    content: Union[str, list[Union[DecisionInputText, DecisionInputImage, DecisionInputJSON]]]
    role: Literal["user"]
    type: Literal["message"] = "message"


class DecisionDeveloperMessage(BaseModel):
    content: Union[str, list[DecisionInputText]]
    role: Literal["developer"]
    type: Literal["message"] = "message"


class DecisionSystemMessage(BaseModel):
    content: Union[str, list[DecisionInputText]]
    role: Literal["system"]
    type: Literal["message"] = "message"


class DecisionAssistantMessage(BaseModel):
    content: Union[str, list[Union[DecisionOutputText, DecisionRefusalPart]]]
    role: Literal["assistant"]
    phase: Optional[Literal["commentary", "final_answer"]] = Field(None, description=NOT_READ)
    type: Literal["message"] = "message"


class DecisionFunctionCall(BaseModel):
    """Shown as ``function_call CALL_ID: namespace.name(arguments)``."""

    arguments: str
    call_id: str
    name: str
    type: Literal["function_call"]
    id: Optional[str] = None
    namespace: Optional[str] = None
    status: Status = None


class DecisionFunctionCallOutput(BaseModel):
    """Shown as ``function_call_output CALL_ID: output``; its call comes earlier in the input."""

    call_id: str
    output: ToolOutput
    type: Literal["function_call_output"]
    id: Optional[str] = None
    status: Status = None


class DecisionCustomToolCall(BaseModel):
    """Shown as ``custom_tool_call CALL_ID: namespace.name(input)``."""

    call_id: str
    input: str
    name: str
    type: Literal["custom_tool_call"]
    id: Optional[str] = None
    namespace: Optional[str] = None
    status: Status = None


class DecisionCustomToolCallOutput(BaseModel):
    """Shown as ``custom_tool_call_output CALL_ID: output``; its call comes earlier in the input."""

    call_id: str
    output: ToolOutput
    type: Literal["custom_tool_call_output"]
    id: Optional[str] = None
    status: Status = None


InputItem = Union[DecisionUserMessage, DecisionDeveloperMessage, DecisionSystemMessage, DecisionAssistantMessage,
                  DecisionFunctionCall, DecisionFunctionCallOutput, DecisionCustomToolCall,
                  DecisionCustomToolCallOutput]


# --------------------------------------------------------------------------- questions


class DecisionPredicateQuestion(BaseModel):
    """How likely a statement about the input is true (System One's ``noul``)."""

    instructions: Instructions
    type: Literal["predicate"]
    name: Omittable = Field(None, description="unique in the request; unnamed questions are answered with name null")


class DecisionChoice(BaseModel):
    value: ChoiceValue = Field(description="a string or a boolean, returned with the type it was sent with; "
                                           "a boolean is shown as true / false, so it must differ from every "
                                           "string value")
    description: Omittable = None


class DecisionChoiceQuestion(BaseModel):
    """One of the values (System One's ``choice``, the values' text as option names)."""

    choices: list[DecisionChoice] = Field(min_length=2, max_length=MAX_CHOICES,
                                          description="--max-options may bound them lower")
    instructions: Instructions
    type: Literal["choice"]
    name: Omittable = None


class DecisionScoreLevel(BaseModel):
    label: str
    description: Omittable = Field(None, description="shown as 'label: description'")


class DecisionScoreQuestion(BaseModel):
    """Ordered levels, lowest first (System One's ``score``)."""

    instructions: Instructions
    levels: list[DecisionScoreLevel] = Field(min_length=2, description="two or more (this server's bound)")
    type: Literal["score"]
    name: Omittable = None


Question = Union[DecisionPredicateQuestion, DecisionChoiceQuestion, DecisionScoreQuestion]


# --------------------------------------------------------------------------- the body


class DecisionPromptCacheOptions(BaseModel):
    """Accepted and not read: this server's prefix cache is automatic and keyed by tokens."""

    mode: Optional[Literal["implicit", "explicit"]] = None
    ttl: Literal["30m"] = "30m"


class DecisionCreateParams(BaseModel):
    """``POST /v1/decisions``: questions about one input, answered in order (the ``openai`` SDK's
    ``client.decisions.create``). Unknown fields are ignored, as the SDK's forward compatibility
    expects; errors are OpenAI's ``{"error": {...}}`` with status 400 and ``param`` naming the field."""

    input: Union[str, Annotated[list[InputItem], Field(min_length=1)]] = Field(
        description="a string, the state as is; or messages and tool calls, one line each")
    model: str = Field(description="the served model or one of its aliases (GET /v1/models)")
    questions: list[Question] = Field(min_length=1, description="--max-questions bounds them (64 by default)")
    prompt_cache_key: Optional[str] = Field(None, description=NOT_READ)
    prompt_cache_options: Optional[DecisionPromptCacheOptions] = None
    safety_identifier: Optional[str] = Field(None, description=NOT_READ)


class DecisionError(BaseModel):
    """OpenAI's error object (the ``openai`` package's ``ErrorObject``), as this door sends it."""

    message: str
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error or server_error")
    param: Optional[str] = Field(None, description="the refused field's path, e.g. questions[1].choices[0].value")
    code: Optional[str] = Field(None, description="e.g. model_not_found, invalid_api_key, rate_limit_exceeded")


class DecisionErrorBody(BaseModel):
    """Every error of ``POST /v1/decisions``: 400 for any invalid request (never 422), 401, 404,
    408, 413, 415, 429 (with ``Retry-After``), 500 and 503, so the ``openai`` SDK raises its own
    classes (``decisions_out.error_response``)."""

    error: DecisionError


DECISION_ERROR_STATUSES = (400, 401, 404, 408, 413, 415, 429, 500, 503)
DECISION_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": DecisionErrorBody} for s in DECISION_ERROR_STATUSES}
"""``responses=`` of the route: each error status with its body, for ``/openapi.json``."""

__all__ = ["DECISION_ERRORS", "DECISION_ERROR_STATUSES", "DecisionCreateParams", "DecisionError", "DecisionErrorBody"]
