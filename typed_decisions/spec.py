"""The question spec: one closed question to ask of a state, or of every row of a labelled set.

``QuestionSpec`` says what to ask (type, instructions, options with descriptions) and how a row maps
to a state and a gold label (``state_field``, ``gold_field``, ``gold_map``). Two rooms share it:
presets (``presets/``) extend it with a policy and serve it, and the evaluation tooling
(``evaluation/``: datasets carry a default spec, ``run.py`` asks it of every row) measures it. It
imports only pydantic and the package's errors, so both can depend on it without depending on
each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import InvalidRequestError

__all__ = ["OptionSpec", "QuestionSpec", "shot_rows"]


class OptionSpec(BaseModel):
    """One option: its name (what the model reads out / the gold label) and a description."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str | None = None


class QuestionSpec(BaseModel):
    """A question to ask of every row, and how a row maps to state and gold label.

    {"name": "spam", "type": "noul", "instructions": "Is this SMS message spam?",
     "options": [{"name": "yes", "description": "..."}, {"name": "no"}],
     "state_field": "text", "gold_field": "label", "gold_map": {"spam": "yes", "ham": "no"}}

    noul options must be named yes, no (in that order); score options are the levels, lowest
    first, and a gold label may be a level name or its index.
    """

    model_config = ConfigDict(extra="forbid")
    name: str = "question"
    type: Literal["noul", "choice", "score"]
    instructions: str | None = None
    options: list[OptionSpec] = Field(min_length=2)
    state_field: str = "state"
    instructions_field: str | None = Field(
        default=None, description="row field holding this row's question text (a question about a passage: "
                                  "the passage is the state); when the row has it, it replaces `instructions`")
    gold_field: str = "gold"
    gold_map: dict[str, str] = Field(default_factory=dict, description="raw gold value → option name")

    @model_validator(mode="after")
    def _check(self) -> QuestionSpec:
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"options: duplicate option names in {names}")
        if self.type == "noul" and names != ["yes", "no"]:
            raise ValueError(f"options: a noul question has the options yes, no (in that order), got {names}")
        bad = sorted(set(self.gold_map.values()) - set(names))
        if bad:
            raise ValueError(f"gold_map: maps to {bad}, which are not options ({names})")
        return self

    @property
    def option_names(self) -> list[str]:
        return [o.name for o in self.options]

    def question(self, order: Sequence[int] | None = None, instructions: str | None = None) -> dict[str, Any]:
        """The wire-format question; ``order`` shows the options permuted (choice only);
        ``instructions`` (a row's own question, ``instructions_for``) replaces the spec's.

        >>> QuestionSpec(type="score", options=[{"name": "low"}, {"name": "high", "description": "urgent"}]).question()
        {'type': 'score', 'criteria': ['low', 'high: urgent']}
        """
        q: dict[str, Any] = {"type": self.type}
        text = instructions if instructions is not None else self.instructions
        if text is not None:
            q["instructions"] = text
        opts = self.options if order is None else [self.options[i] for i in order]
        if self.type == "choice":
            q["criteria"] = {o.name: o.description for o in opts}
        elif self.type == "score":
            q["criteria"] = [f"{o.name}: {o.description}" if o.description else o.name for o in opts]
        else:
            yes, no = self.options
            if yes.description is not None or no.description is not None:
                q["criteria"] = {"true": yes.description, "false": no.description}
        return q

    def request(self, model: str, state: Any, order: Sequence[int] | None = None,
                instructions: str | None = None) -> dict[str, Any]:
        """The wire request asking this question (alone) about ``state``.

        >>> QuestionSpec(name="spam", type="noul", options=[{"name": "yes"}, {"name": "no"}]).request("m", "hi")
        {'model': 'm', 'state': 'hi', 'questions': {'spam': {'type': 'noul'}}}
        """
        return {"model": model, "state": state, "questions": {self.name: self.question(order, instructions)}}

    def instructions_for(self, row: Mapping[str, Any], n: int = 0) -> str | None:
        """The row's own question text (``instructions_field``), or None to use ``instructions``.

        The question goes into the request's ``instructions`` and the row's state stays the passage,
        so the compiler puts the passage in the shared prefix and the question after it.
        """
        if self.instructions_field is None:
            return None
        if self.instructions_field not in row:
            raise InvalidRequestError(f"row {n} has no instructions field {self.instructions_field!r} "
                                      "(set instructions_field in the spec, or drop it)")
        return str(row[self.instructions_field])

    def row_request(self, model: str, row: Mapping[str, Any], n: int = 0,
                    order: Sequence[int] | None = None) -> dict[str, Any]:
        """The request for one labelled row: its state, and its own question if it has one."""
        return self.request(model, self.state(row, n), order, self.instructions_for(row, n))

    def wire_answer(self, option: str) -> str:
        """An option name as a wire example answers it (``schema.option_keys``): the name itself,
        or for score the level's number.

        >>> QuestionSpec(type="score", options=[{"name": "low"}, {"name": "high"}]).wire_answer("high")
        '1'
        """
        names = self.option_names
        if option not in names:
            raise InvalidRequestError(f"{option!r} is not an option of question {self.name!r} ({names})")
        return str(names.index(option)) if self.type == "score" else option

    def example(self, row: Mapping[str, Any], n: int = 0) -> dict[str, Any]:
        """A labelled row as a wire few-shot example (``schema.Example``): its state, its gold
        answer, and its own question text when the spec has ``instructions_field``.

        >>> QuestionSpec(name="spam", type="noul", options=[{"name": "yes"}, {"name": "no"}]).example(
        ...     {"state": "WIN NOW", "gold": "yes"})
        {'state': 'WIN NOW', 'answers': {'spam': 'yes'}}
        """
        ex: dict[str, Any] = {"state": self.state(row, n),
                              "answers": {self.name: self.wire_answer(self.option_names[self.gold_index(row, n)])}}
        own = self.instructions_for(row, n)
        if own is not None:
            ex["instructions"] = {self.name: own}
        return ex

    def state(self, row: Mapping[str, Any], n: int = 0) -> str:
        if self.state_field not in row:
            raise InvalidRequestError(f"row {n} has no state field {self.state_field!r} (set state_field in the spec)")
        return str(row[self.state_field])

    def gold_index(self, row: Mapping[str, Any], n: int = 0) -> int:
        """Index of the row's gold option (via gold_map; score levels also by index)."""
        if self.gold_field not in row:
            raise InvalidRequestError(f"row {n} has no gold field {self.gold_field!r} (set gold_field in the spec)")
        raw = row[self.gold_field]
        if isinstance(raw, bool):
            raw = "yes" if raw else "no"
        key = self.gold_map.get(str(raw), str(raw))
        names = self.option_names
        if key in names:
            return names.index(key)
        if self.type == "score" and isinstance(raw, int) and 0 <= raw < len(names):
            return raw
        raise InvalidRequestError(f"row {n}: gold label {raw!r} is not an option ({names}); add it to gold_map")


def shot_rows(spec: QuestionSpec, rows: Sequence[Mapping[str, Any]], k: int) -> list[Mapping[str, Any]]:
    """The k rows to show as few-shot examples: one row of each gold class first (the first of
    each class in ``rows``' order, while there are fewer picked than k), then the next rows in
    order; returned in ``rows``' order (the fixed hash order of a split, so always the same k).

    >>> spec = QuestionSpec(type="choice", options=[{"name": "a"}, {"name": "b"}])
    >>> rows = [{"state": "1", "gold": "a"}, {"state": "2", "gold": "a"}, {"state": "3", "gold": "b"}]
    >>> [r["state"] for r in shot_rows(spec, rows, 2)], [r["state"] for r in shot_rows(spec, rows, 3)]
    (['1', '3'], ['1', '2', '3'])
    """
    if k < 0:
        raise InvalidRequestError(f"shots must be >= 0, got {k}")
    picked: set[int] = set()
    seen: set[int] = set()
    for i, row in enumerate(rows):
        if len(picked) >= k:
            break
        g = spec.gold_index(row, i)
        if g not in seen:
            seen.add(g)
            picked.add(i)
    for i in range(len(rows)):
        if len(picked) >= k:
            break
        picked.add(i)
    return [rows[i] for i in sorted(picked)]
