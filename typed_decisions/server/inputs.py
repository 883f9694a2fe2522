"""Bounds on what a decoded body may hold, checked before the schema and the model see it.

``body.py`` bounds the bytes (size, decompression, time); this module bounds the JSON in them::

    parse_json    bytes → value; invalid UTF-8 / JSON, or nesting too deep for the parser → 422
    check_json    one iterative walk: nesting depth, strings and keys that are not valid Unicode
                  (lone surrogates such as "\\ud800", which no tokenizer or log file can encode),
                  object keys longer than the name limit
    check_questions  counts and lengths the compiler would otherwise pay for: questions per
                  request, options per choice / levels per score, question and option name lengths

Each refusal is an ``InvalidRequestError`` (422) whose ``loc`` is the field's path and whose
message names the limit and its setting. A path never echoes more than a short, escaped prefix
of a hostile key, so an error body stays small and always encodable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidRequestError, Loc


def _refuse(kind: str, msg: str, loc: Loc = ()) -> InvalidRequestError:
    err = InvalidRequestError(msg, loc)
    err.kind = kind  # type: ignore[attr-defined]
    return err


def shown(text: str, limit: int = 40) -> str:
    """A key as it may appear in an error: escaped (no lone surrogates), at most ``limit`` chars.

    >>> shown("ok"), shown("\\ud800x"), shown("a" * 50, 5)
    ('ok', '\\\\ud800x', 'aaaaa…')
    """
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= limit else safe[:limit] + "…"


def _valid_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_json(body: bytes) -> Any:
    """The body as JSON, or a 422 that says why not (UTF-8, syntax, or parser depth)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise _refuse("json_too_deep", "the body nests arrays/objects deeper than the JSON parser "
                      "allows; flatten the state (the server's limit is --max-json-depth)") from None
    except ValueError as e:  # includes UnicodeDecodeError: the body is not UTF-8
        raise _refuse("json_invalid", f"the body is not valid JSON (UTF-8): {e}") from None


def check_json(value: Any, *, max_depth: int, max_key_chars: int) -> None:
    """Walk ``value`` once (no recursion) and refuse the first thing out of bounds.

    >>> check_json({"a": [[1]]}, max_depth=3, max_key_chars=8)
    >>> check_json({"a": [[[1]]]}, max_depth=3, max_key_chars=8)
    Traceback (most recent call last):
    ...
    typed_decisions.errors.InvalidRequestError: a.0.0: nesting deeper than 3 levels (--max-json-depth); flatten this value
    """
    stack: list[tuple[Any, Loc, int]] = [(value, (), 1)]
    while stack:
        node, loc, depth = stack.pop()
        if isinstance(node, str):
            if not _valid_unicode(node):
                raise _refuse("string_unicode", "the string holds a lone surrogate (e.g. \\ud800), "
                              "which is not valid Unicode; send UTF-8 text", loc)
            continue
        if not isinstance(node, (dict, list)):
            continue
        if depth > max_depth:
            raise _refuse("json_too_deep", f"nesting deeper than {max_depth} levels "
                          "(--max-json-depth); flatten this value", loc)
        if isinstance(node, list):
            stack.extend((child, (*loc, i), depth + 1) for i, child in enumerate(node))
            continue
        for key, child in node.items():
            if not _valid_unicode(key):
                raise _refuse("string_unicode", "this key holds a lone surrogate (e.g. \\ud800), "
                              "which is not valid Unicode; send UTF-8 text", (*loc, shown(key)))
            if len(key) > max_key_chars:
                raise _refuse("name_too_long", f"a key of {len(key)} characters; the limit is "
                              f"{max_key_chars} (--max-name-chars)", (*loc, shown(key)))
            stack.append((child, (*loc, key), depth + 1))


def check_questions(body: Any, *, max_questions: int, max_options: int) -> None:
    """Questions per request and options (levels) per question, before the schema sees them.
    Names are already bounded by ``check_json``'s key limit."""
    questions = body.get("questions") if isinstance(body, Mapping) else None
    if not isinstance(questions, Mapping):
        return  # the schema says what is missing
    if len(questions) > max_questions:
        raise _refuse("too_many_questions", f"{len(questions)} questions; the limit is {max_questions} "
                      "per request (--max-questions); split the request", ("questions",))
    for name, question in questions.items():
        criteria = question.get("criteria") if isinstance(question, Mapping) else None
        if isinstance(criteria, (Mapping, list)) and len(criteria) > max_options:
            raise _refuse("too_many_options", f"{len(criteria)} options; the limit is {max_options} "
                          "per question (--max-options)", ("questions", name, "criteria"))


__all__ = ["check_json", "check_questions", "parse_json", "shown"]
