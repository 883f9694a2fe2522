"""OpenAI's Decisions API (``POST /v1/decisions``) translated in: a body → a System One request.

The spec is the ``openai`` package's ``types/decision_create_params.py`` (request) and
``types/decision.py`` (``Decision``, the response). This module holds only the translation; the
request runs the System One path (``service.py``: auth, limits, queue, ``Decider.run_many``)::

    body ─ to_system_one ─▶ Translated (a DecisionRequest keyed "0", "1", ... + what the answers
         need back: names, typed choice values, level labels)
         ─ queue, set_aside.py (questions the compiler refuses become refusals) ─▶ Answered
         ─ decisions_out.to_decision ─▶ Decision (answers in question order, usage)

Input → state. A string is the state as is. A list of items becomes one line per item, roles and
tool calls kept, so an agent's conversation can be routed on::

    user: I was charged twice.                      a message: "role: text" (parts joined by "\\n";
    assistant: Which order?                         input_json parts as compact JSON)
    function_call call_1: lookup_order({"id": 7})   a call: its id, (namespace.)name and arguments
    function_call_output call_1: {"status": "paid"} an output: its call's id, its text
    custom_tool_call call_2: grep(refund)           the same for custom tools
    custom_tool_call_output call_2: 3 matches

Questions → System One questions: ``predicate`` → noul (its instructions the question);
``choice`` → choice whose option names are the values' labels (a string as is, a boolean as
``true`` / ``false``; two values with one label are refused), descriptions kept; ``score`` →
score whose level i reads ``label: description`` (or the label alone). Image parts anywhere are
refused (a text-only model), naming the part. ``prompt_cache_key``, ``prompt_cache_options``
and ``safety_identifier`` are accepted and not read (the prefix cache is automatic); unknown
fields are ignored, as the SDK's forward compatibility expects.

Every refusal here is an ``InvalidRequestError`` whose ``loc`` is the field's path in this door's
terms; ``decisions_out.error_response`` sends it as OpenAI's 400 with ``param`` naming the field
(``questions[1].choices[0].value``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union

from pydantic import StrictBool, StrictStr

from ..errors import InvalidRequestError, Loc

MAX_CHOICES = 255  # the spec's bound ("between 2 and 255 choices"); --max-options may be lower
ChoiceValue = Union[StrictStr, StrictBool]


def _bad(msg: str, *loc: str | int) -> InvalidRequestError:
    return InvalidRequestError(msg, tuple(loc))


# --------------------------------------------------------------------------- the request, in


@dataclass(frozen=True)
class QuestionOut:
    """What one question's answer needs back: its name and type, and its options' typed values
    (choice) or labels (score), in the order sent."""

    name: str | None
    type: Literal["predicate", "choice", "score"]
    values: tuple[ChoiceValue, ...] = ()    # choice: the values as sent; option i's label is labels[i]
    labels: tuple[str, ...] = ()            # choice: option names; score: level labels


@dataclass(frozen=True)
class Translated:
    """A ``/v1/decisions`` body as a System One request: ``request["questions"]`` is keyed by the
    question's index ("0", "1", ...), whatever its name; ``questions[i]`` maps answer i back."""

    request: dict[str, Any]
    questions: tuple[QuestionOut, ...]


def _text(value: Any, *loc: str | int) -> str:
    if not isinstance(value, str):
        raise _bad(f"expected a string, got {type(value).__name__}", *loc)
    return value


def _json_text(data: Any, *loc: str | int) -> str:
    if not isinstance(data, (dict, list)):
        raise _bad("an input_json part's 'data' is a JSON object or an array of objects", *loc, "data")
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


_IMAGE_PARTS = {"input_image", "image_url", "image", "input_file"}
_TEXT_KEYS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def _parts(content: Any, *loc: str | int, allowed: Sequence[str]) -> str:
    """A string, or a list of parts joined by newlines: text as is, ``input_json`` as compact
    JSON; an image part is refused by its path (this model reads text only)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad("expected a string or an array of content parts", *loc)
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        kind = kind if isinstance(kind, str) else repr(kind)  # never hash what the caller sent
        if kind in _IMAGE_PARTS:
            raise _bad(f"an {kind!r} part: this server runs a text-only model, so images are not read; "
                       "send the content as text (input_text) or JSON (input_json)", *loc, j)
        if kind not in allowed:
            raise _bad(f"unknown content part type {kind!r}; expected one of {', '.join(allowed)}",
                       *loc, j, "type")
        if kind == "input_json":
            out.append(_json_text(part.get("data"), *loc, j))
        else:
            out.append(_text(part.get(_TEXT_KEYS[kind]), *loc, j, _TEXT_KEYS[kind]))
    return "\n".join(out)


_MESSAGE_PARTS = {"user": ("input_text", "input_json"), "system": ("input_text", "input_json"),
                  "developer": ("input_text", "input_json"), "assistant": ("output_text", "refusal")}
_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
_OUTPUTS = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}


def render_input(value: Any) -> str:
    """The state for ``input`` (the module docstring shows the lines).

    >>> render_input([{"role": "user", "content": "Refund?"},
    ...               {"type": "function_call", "call_id": "c1", "name": "order", "arguments": "{}"},
    ...               {"type": "function_call_output", "call_id": "c1", "output": "paid"}])
    'user: Refund?\\nfunction_call c1: order({})\\nfunction_call_output c1: paid'
    """
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise _bad("'input' is a string or a non-empty array of messages and tool calls", "input")
    lines: list[str] = []
    calls: dict[str, str] = {}  # call_id → its kind
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _bad("each input item is an object (a message, a tool call or its output)", "input", i)
        kind = item.get("type", "message")
        kind = kind if isinstance(kind, str) else repr(kind)
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in _MESSAGE_PARTS:
                raise _bad(f"unknown role {role!r}; one of user, system, developer, assistant", "input", i, "role")
            if "content" not in item:
                raise _bad("a message needs 'content'", "input", i)
            lines.append(f"{role}: {_parts(item['content'], 'input', i, 'content', allowed=_MESSAGE_PARTS[role])}")
        elif kind in _CALLS:
            call_id = _text(item.get("call_id"), "input", i, "call_id")
            name = _text(item.get("name"), "input", i, "name")
            if item.get("namespace"):
                name = f"{_text(item['namespace'], 'input', i, 'namespace')}.{name}"
            args = _text(item.get(_CALLS[kind]), "input", i, _CALLS[kind])
            calls[call_id] = kind
            lines.append(f"{kind} {call_id}: {name}({args})")
        elif kind in _OUTPUTS:
            call_id = _text(item.get("call_id"), "input", i, "call_id")
            if calls.get(call_id) != _OUTPUTS[kind]:
                raise _bad(f"{kind} {call_id!r} has no earlier {_OUTPUTS[kind]} with that call_id; each "
                           "tool output follows its call", "input", i, "call_id")
            if "output" not in item:
                raise _bad(f"a {kind} needs 'output'", "input", i)
            lines.append(f"{kind} {call_id}: {_parts(item['output'], 'input', i, 'output', allowed=('input_text',))}")
        else:
            raise _bad(f"unknown input item type {kind!r}; one of message, function_call, function_call_output, "
                       "custom_tool_call, custom_tool_call_output", "input", i, "type")
    return "\n".join(lines)


def label_of(value: ChoiceValue) -> str:
    """The option name a choice value is shown and read by.

    >>> label_of(True), label_of("billing")
    ('true', 'billing')
    """
    return ("true" if value else "false") if isinstance(value, bool) else value


def _choice(q: Mapping[str, Any], i: int, max_options: int, max_name_chars: int
            ) -> tuple[dict[str, Any], tuple[ChoiceValue, ...]]:
    choices = q.get("choices")
    if not isinstance(choices, list):
        raise _bad("a choice question needs 'choices': an array of {value, description?}", "questions", i, "choices")
    limit = min(MAX_CHOICES, max_options)
    if not 2 <= len(choices) <= limit:
        why = "--max-options" if max_options < MAX_CHOICES else "the API's bound"
        raise _bad(f"{len(choices)} choices; give between 2 and {limit} ({why})", "questions", i, "choices")
    criteria: dict[str, Any] = {}
    seen: dict[str, ChoiceValue] = {}
    values: list[ChoiceValue] = []
    for j, c in enumerate(choices):
        value = c.get("value") if isinstance(c, Mapping) else None
        if not isinstance(value, (str, bool)):
            raise _bad("a choice's 'value' is a string or a boolean", "questions", i, "choices", j, "value")
        label = label_of(value)
        if label in seen:
            raise _bad(f"values {json.dumps(seen[label])} and {json.dumps(value)} would both be shown and read as "
                       f"{label!r}; make them distinct", "questions", i, "choices", j, "value")
        if not label.strip():
            raise _bad("an empty or blank value cannot be shown as an option; give it visible text",
                       "questions", i, "choices", j, "value")
        if len(label) > max_name_chars:
            raise _bad(f"a value of {len(label)} characters; the limit is {max_name_chars} (--max-name-chars)",
                       "questions", i, "choices", j, "value")
        description = c.get("description")
        if description is not None and not isinstance(description, str):
            raise _bad("a choice's 'description' is a string", "questions", i, "choices", j, "description")
        seen[label] = value
        values.append(value)
        criteria[label] = description
    return criteria, tuple(values)


def _score(q: Mapping[str, Any], i: int, max_options: int) -> tuple[list[str], tuple[str, ...]]:
    levels = q.get("levels")
    if not isinstance(levels, list) or len(levels) < 2:
        raise _bad("a score question needs 'levels': two or more {label, description?}, lowest first",
                   "questions", i, "levels")
    if len(levels) > max_options:
        raise _bad(f"{len(levels)} levels; the limit is {max_options} (--max-options)", "questions", i, "levels")
    criteria, labels = [], []
    for j, level in enumerate(levels):
        if not isinstance(level, Mapping):
            raise _bad("a level is {label, description?}", "questions", i, "levels", j)
        label = _text(level.get("label"), "questions", i, "levels", j, "label")
        if not label.strip():
            raise _bad("a level's label is empty; give every level visible text", "questions", i, "levels", j, "label")
        description = level.get("description")
        if description is not None:
            description = _text(description, "questions", i, "levels", j, "description")
        labels.append(label)
        criteria.append(f"{label}: {description}" if description else label)
    return criteria, tuple(labels)


def to_system_one(body: Any, *, max_questions: int, max_options: int, max_name_chars: int) -> Translated:
    """A ``/v1/decisions`` body as a System One request, under the server's limits
    (``--max-questions``, ``--max-options``, ``--max-name-chars``: the same as ``/v1/systemone``'s)."""
    if not isinstance(body, Mapping):
        raise _bad("the body is a JSON object: {model, input, questions}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required: a model name (GET /v1/models lists them)", "model")
    if "input" not in body:
        raise _bad("'input' is required: a string or an array of messages and tool calls", "input")
    state = render_input(body["input"])
    questions = body.get("questions")
    if not isinstance(questions, list) or not questions:
        raise _bad("'questions' is required: a non-empty array of predicate, choice or score questions",
                   "questions")
    if len(questions) > max_questions:
        raise _bad(f"{len(questions)} questions; the limit is {max_questions} per request (--max-questions); "
                   "split the request", "questions")
    wire: dict[str, Any] = {}
    outs: list[QuestionOut] = []
    names: dict[str, int] = {}
    for i, q in enumerate(questions):
        if not isinstance(q, Mapping):
            raise _bad("each question is an object with a 'type'", "questions", i)
        name = q.get("name")
        if name is not None:
            name = _text(name, "questions", i, "name")
            if len(name) > max_name_chars:
                raise _bad(f"a name of {len(name)} characters; the limit is {max_name_chars} (--max-name-chars)",
                           "questions", i, "name")
            if name in names:
                raise _bad(f"questions {names[name]} and {i} are both named {name!r}; names must be unique",
                           "questions", i, "name")
            names[name] = i
        kind = q.get("type")
        if "instructions" not in q:
            raise _bad("a question needs 'instructions'", "questions", i, "instructions")
        instructions = _parts(q["instructions"], "questions", i, "instructions", allowed=("input_text", "input_json"))
        if kind == "predicate":
            wire[str(i)] = {"type": "noul", "instructions": instructions}
            outs.append(QuestionOut(name, "predicate"))
        elif kind == "choice":
            criteria, values = _choice(q, i, max_options, max_name_chars)
            wire[str(i)] = {"type": "choice", "instructions": instructions, "criteria": criteria}
            outs.append(QuestionOut(name, "choice", values, tuple(criteria)))
        elif kind == "score":
            criteria_list, labels = _score(q, i, max_options)
            wire[str(i)] = {"type": "score", "instructions": instructions, "criteria": criteria_list}
            outs.append(QuestionOut(name, "score", (), labels))
        else:
            raise _bad(f"unknown question type {kind!r}; one of predicate, choice, score", "questions", i, "type")
    return Translated({"model": model, "state": state, "questions": wire}, tuple(outs))


def system_one_loc(loc: Loc, translated: Translated) -> Loc:
    """A System One field path (an error from the schema or the compiler) as this door's:
    ``("questions", "1", "criteria", "x")`` → ``("questions", 1, "choices")``; ``state`` → ``input``."""
    if loc[:1] == ("state",):
        return ("input",)
    if loc[:1] == ("questions",) and len(loc) > 1 and str(loc[1]).isdigit():
        i = int(loc[1])
        rest: tuple[str | int, ...] = ()
        if len(loc) > 2 and loc[2] == "criteria" and i < len(translated.questions):
            rest = ("choices" if translated.questions[i].type == "choice" else "levels",)
        elif len(loc) > 2 and loc[2] == "instructions":
            rest = ("instructions",)
        return ("questions", i, *rest)
    return loc


def retarget(error: InvalidRequestError, translated: Translated) -> InvalidRequestError:
    """The same error with this door's field paths (its class kept: tokenizer, context length)."""
    out = type(error)(error.msg, errors=[(system_one_loc(loc, translated), msg) for loc, msg in error.errors])
    kind = getattr(error, "kind", None)
    if kind:
        out.kind = kind  # type: ignore[attr-defined]
    return out

__all__ = ["ChoiceValue", "QuestionOut", "Translated", "label_of", "render_input", "retarget", "system_one_loc",
           "to_system_one"]
