"""The table form of typed answers: one fixed Arrow schema per question set, whatever the data.

``data.py`` labels batches; this module owns only how answers become columns. The schema depends
on the questions alone, so every batch of every run has the same columns in the same order with
the same types, and a row that could not be answered (its ``td_error`` says why) has nulls in its
answer columns rather than a missing column. For each question ``q``:

=========  =====================  =========  ================================================
type       column                 Arrow      value
=========  =====================  =========  ================================================
noul       ``q``                  float64    P(yes)
choice     ``q``                  string     the chosen option's name
choice     ``q__confidence``      float64    the answer's confidence
choice     ``q__p__<option>``     float64    probability of each option, in criteria order
score      ``q``                  float64    expected level (0 … n-1)
score      ``q__confidence``      float64    the answer's confidence
score      ``q__p__<level>``      float64    probability of each level 0 … n-1
(all)      ``td_error``           string     null, or ``ErrorClass: message`` for that row
=========  =====================  =========  ================================================

The input's own columns come first, unchanged.

>>> from typed_decisions.schema import DecisionRequest
>>> qs = DecisionRequest.model_validate({"model": "m", "state": "s", "questions": {
...     "team": {"type": "choice", "criteria": {"billing": None, "tech": None}},
...     "urgent": {"type": "noul", "instructions": "Urgent?"}}}).questions
>>> [f"{f.name}:{f.type}" for f in answer_fields(qs)]
['team:string', 'team__confidence:double', 'team__p__billing:double', 'team__p__tech:double', 'urgent:double', 'td_error:string']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from typed_decisions.errors import InvalidRequestError
from typed_decisions.schema import DecisionResponse, Question

ERROR_COLUMN = "td_error"
SEP = "__"


def _options(question: Question) -> list[str]:
    """The probability keys of a question's answer: option names (choice), levels (score)."""
    if question.type == "choice":
        return list(question.criteria)
    if question.type == "score":
        return [str(i) for i in range(len(question.criteria))]
    return []


def answer_fields(questions: Mapping[str, Question]) -> list[pa.Field]:
    """The answer columns, in question order, then ``td_error``."""
    fields: list[pa.Field] = []
    for name, q in questions.items():
        fields.append(pa.field(name, pa.string() if q.type == "choice" else pa.float64()))
        if q.type != "noul":
            fields.append(pa.field(f"{name}{SEP}confidence", pa.float64()))
            fields += [pa.field(f"{name}{SEP}p{SEP}{o}", pa.float64()) for o in _options(q)]
    return [*fields, pa.field(ERROR_COLUMN, pa.string())]


def output_schema(input_schema: pa.Schema, questions: Mapping[str, Question]) -> pa.Schema:
    """The input's columns, then the answer columns; refuses a name both would use."""
    fields = answer_fields(questions)
    clash = sorted(set(input_schema.names) & {f.name for f in fields})
    if clash:
        raise InvalidRequestError(
            f"the input already has column(s) {', '.join(clash)}, which the answers would write; "
            "rename the question(s) or drop those columns first", ("questions", clash[0]))
    return pa.schema([*input_schema, *fields])


def answer_columns(questions: Mapping[str, Question],
                   results: Sequence[DecisionResponse | BaseException]) -> dict[str, list[Any]]:
    """Column name → one value per result (None where the row failed).

    >>> from typed_decisions.schema import DecisionRequest, DecisionResponse
    >>> qs = DecisionRequest.model_validate({"model": "m", "state": "s", "questions": {
    ...     "urgent": {"type": "noul", "instructions": "Urgent?"}}}).questions
    >>> ok = DecisionResponse.model_validate({"model": "m", "usage": {"input_tokens": 9},
    ...     "answers": {"urgent": {"type": "noul", "noul": 0.25}}})
    >>> answer_columns(qs, [ok, ValueError("too long")])
    {'urgent': [0.25, None], 'td_error': [None, 'ValueError: too long']}
    """
    cols: dict[str, list[Any]] = {f.name: [] for f in answer_fields(questions)}
    for result in results:
        if isinstance(result, BaseException):
            for values in cols.values():
                values.append(None)
            cols[ERROR_COLUMN][-1] = f"{type(result).__name__}: {result}"
            continue
        for name, q in questions.items():
            a = result.answers[name]
            if q.type == "noul":
                cols[name].append(a.noul)
                continue
            cols[name].append(a.choice if q.type == "choice" else a.score)
            cols[f"{name}{SEP}confidence"].append(a.confidence)
            for o in _options(q):
                cols[f"{name}{SEP}p{SEP}{o}"].append(a.probabilities[o])
        cols[ERROR_COLUMN].append(None)
    return cols


__all__ = ["ERROR_COLUMN", "SEP", "answer_columns", "answer_fields", "output_schema"]
