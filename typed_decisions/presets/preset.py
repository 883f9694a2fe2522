"""What a preset is: a worded question, a policy for acting on its answer, and what was fitted for it.

A preset (``Preset``) is the question as a ``spec.QuestionSpec`` whose options may carry
``threshold`` and ``never_auto``, a default ``policy.threshold``, optionally labelled ``examples``
``[{"state": ..., "answer": OPTION}]`` that every request shows before its state (few-shot, their
KV cached across requests as part of the shared prefix), and per model key (``Decider.name``, plus
``:int8`` for an INT8 export) a ``calibration`` fitted on the preset's own dataset and a ``fitted``
head. The validators here keep those consistent with the question (a calibration read after other
examples, or a head over other options, is refused naming the field). Loading and the version
registry are ``store.py``; which calibration or head a call uses is ``selection.py``; asking is
``answer.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..calibration import FixedCalibration, TypeCalibration, calibrate
from ..compiler import QuestionLabels
from ..errors import TypedDecisionsError
from ..fitted import FittedHead
from ..schema import Content, Debias, json_sha256
from ..spec import OptionSpec, QuestionSpec

__all__ = ["Policy", "Preset", "PresetCalibration", "PresetError", "PresetExample", "PresetFit", "PresetOption",
           "PresetQuestion", "content_hash", "examples_hash"]


class PresetError(TypedDecisionsError):
    """A preset is unknown, malformed, or changed without a version bump."""


class PresetOption(OptionSpec):
    threshold: float | None = Field(None, ge=0, le=1, description="act only if p >= this (default: the policy's)")
    never_auto: bool = Field(False, description="never act automatically when this option wins")


class PresetQuestion(QuestionSpec):
    options: list[PresetOption] = Field(min_length=2)  # type: ignore[assignment]


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: float = Field(0.8, ge=0, le=1, description="default probability needed to act automatically")


class PresetFit(BaseModel):
    """Where a preset calibration came from (written by ``calibrate --to-preset``; informative)."""

    model_config = ConfigDict(extra="forbid")
    dataset: str | None = None
    split: Literal["calibration"] = "calibration"
    rows: int = Field(ge=1, description="calibration-split rows fitted on")
    method: Literal["none", "temperature", "contextual", "combined"]
    test_rows: int | None = Field(None, ge=1)
    test_nll_before: float | None = None
    test_nll_after: float | None = None
    test_ece_before: float | None = None
    test_ece_after: float | None = None
    date: str = ""
    command: str = ""


class PresetCalibration(TypeCalibration):
    """One model's calibration of a preset's question: ``TypeCalibration`` (temperature, contextual)
    plus what a ``CalibrationFile`` computes at decide time, fixed here because the question is:
    the content-free probabilities p_cf (option order) for ``content_free_state``. Valid only for
    the reading it was fitted under (resolved label mode, debias, wording).

    >>> c = PresetCalibration(temperature=0.5, contextual=True, content_free_state="N/A",
    ...                       content_free=[0.75, 0.25], labels="names")
    >>> c.apply([0.6, 0.4]).round(4).tolist()        # p / p_cf ∝ 1 : 2, then squared: 1 : 4
    [0.2, 0.8]
    """

    labels: QuestionLabels = Field(description="label mode the question was read with (resolved: names/letters/mixture)")
    debias: Debias = "none"
    wording: str = "default"
    examples: str | None = Field(None, description="examples_hash of the few-shot examples the fit asked with "
                                                   "(None: fitted without examples); must be the preset's own")
    content_free_state: str | None = Field(None, description="the state p_cf was read for (contextual only)")
    content_free: list[float] | None = Field(None, description="p_cf in option order (contextual only), all > 0")
    fitted: PresetFit | None = None

    @model_validator(mode="after")
    def _content_free_iff_contextual(self) -> PresetCalibration:
        if self.contextual and (self.content_free is None or self.content_free_state is None):
            raise ValueError("contextual is true: give content_free (p_cf, one per option) and content_free_state")
        if not self.contextual and self.content_free is not None:
            raise ValueError("content_free is only used when contextual is true")
        if self.content_free is not None and not all(x > 0 for x in self.content_free):
            raise ValueError(f"content_free entries must all be > 0 (they divide), got {self.content_free}")
        return self

    def apply(self, probs: Any) -> np.ndarray:
        """``calibration.calibrate``: p / p_cf (if contextual), then temperature."""
        return calibrate(probs, self.temperature, self.content_free if self.contextual else None)

    def fixed(self, note: str) -> FixedCalibration:
        """This calibration as the Decider applies it to one question's answer, saying ``note``."""
        return FixedCalibration(self.temperature, tuple(self.content_free) if self.contextual and self.content_free
                                else None, note)

    def describe(self) -> str:
        return f"T={self.temperature:g}" + (", contextual" if self.contextual else "")


class PresetExample(BaseModel):
    """A labelled few-shot example: a state and the name of its gold option."""

    model_config = ConfigDict(extra="forbid")
    state: Content
    answer: str


class Preset(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    version: int = Field(ge=1)
    description: str = ""
    question: PresetQuestion
    policy: Policy = Field(default_factory=Policy)
    dataset: str | None = Field(None, description="a datasets.py name whose gold labels are this question's options")
    examples: list[PresetExample] = Field(
        default_factory=list, description="labelled examples shown before the state (few-shot; "
                                          "cached across requests as part of the shared prefix)")
    calibration: dict[str, PresetCalibration] | None = Field(
        None, description="model key (Decider.name, + ':int8' for an INT8 export) → its calibration fitted on this "
                          "preset's dataset")
    fitted: dict[str, FittedHead] | None = Field(
        None, description="model key → a head fitted on labelled rows for this question (typed-decisions fit); "
                          "it answers instead of the zero-shot readout (and of any calibration)")

    @model_validator(mode="after")
    def _examples_answer_options(self) -> Preset:
        names = [o.name for o in self.question.options]
        for i, ex in enumerate(self.examples):
            if ex.answer not in names:
                raise ValueError(f"examples.{i}.answer: {ex.answer!r} is not an option of the question ({names})")
        return self

    @model_validator(mode="after")
    def _calibrations_fit_the_question(self) -> Preset:
        own = examples_hash(self.examples)
        for model, cal in (self.calibration or {}).items():
            if not model:
                raise ValueError("calibration: model names must be non-empty")
            if cal.examples != own:
                # the preset's answers are read after its examples: a fit read otherwise would not match them
                fitted = f"with examples {cal.examples}" if cal.examples else "without examples"
                has = f"has examples {own}" if own else "has none"
                raise ValueError(f"calibration.{model}.examples: fitted {fitted}, but the preset {has}; refit with "
                                 f"typed-decisions calibrate --preset FILE --to-preset FILE")
            if cal.content_free is not None and len(cal.content_free) != len(self.question.options):
                raise ValueError(f"calibration.{model}.content_free has {len(cal.content_free)} entries; "
                                 f"the question has {len(self.question.options)} options")
        return self

    @model_validator(mode="after")
    def _heads_fit_the_question(self) -> Preset:
        spec = self.question_spec()
        keys = [spec.wire_answer(o) for o in spec.option_names] if spec.type != "noul" else ["yes", "no"]
        for model, head in (self.fitted or {}).items():
            if head.model != model:
                raise ValueError(f"fitted.{model}: the head was fitted for model {head.model!r}")
            if head.question_type != spec.type or sorted(head.classes) != sorted(keys):
                raise ValueError(f"fitted.{model}: the head answers a {head.question_type} question with options "
                                 f"{head.classes}; this preset's question is {spec.type} with {keys}")
        return self

    def wire_examples(self) -> list[dict[str, Any]]:
        """The examples as the wire request's ``examples`` (``schema.Example``)."""
        spec = self.question_spec()
        return [{"state": ex.state, "answers": {spec.name: spec.wire_answer(ex.answer)}} for ex in self.examples]

    def question_spec(self) -> QuestionSpec:
        """The question alone (policy fields dropped), for evaluation."""
        q = self.question.model_dump()
        q["options"] = [{"name": o["name"], "description": o["description"]} for o in q["options"]]
        return QuestionSpec.model_validate(q)


def examples_hash(examples: Sequence[PresetExample]) -> str | None:
    """Short sha256 of a preset's few-shot examples (states and answers, in order); None for none.
    A calibration records the examples it was fitted with, so a preset whose examples change
    cannot keep a fit read after other ones.

    >>> examples_hash([]) is None
    True
    >>> a = [PresetExample(state="Win cash now", answer="yes")]
    >>> examples_hash(a) == examples_hash(list(a)), examples_hash(a) == examples_hash([PresetExample(state="Win", answer="yes")])
    (True, False)
    """
    if not examples:
        return None
    return "sha256:" + json_sha256({"examples": [ex.model_dump(mode="json") for ex in examples]})[:16]


def content_hash(data: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a preset's parsed content (``schema.json_sha256``).

    >>> content_hash({"b": 1, "a": "é"}) == content_hash({"a": "é", "b": 1})
    True
    """
    return json_sha256(data)
