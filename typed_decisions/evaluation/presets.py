"""Versioned question presets: a worded question plus a policy for acting on its answer.

A preset is a JSON data file in ``typed_decisions/evaluation/presets_data/`` (name, version,
description, the question as a ``spec.QuestionSpec`` whose options may carry ``threshold`` and
``never_auto``, a default ``policy.threshold``, and optionally labelled ``examples``
``[{"state": ..., "answer": OPTION}]`` that every request shows before its state: few-shot, their
KV cached across requests as part of the shared prefix). Wording is part of the contract: answers and
evaluation numbers hold for one version, so ``presets_data/_registry.json`` records the content
hash of every released version::

    {"sms-spam": {"1": "<sha256 of the canonical JSON of version 1>"}, ...}

and ``load_preset`` refuses a shipped preset whose content does not match the hash registered for
its declared version (an edit without a version bump). Canonical JSON: ``json.dumps(obj,
sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` of the parsed file, so whitespace and
key order do not matter (``schema.json_sha256``). ``typed-decisions presets hash NAME`` prints the
line to add after a bump.

Acting automatically (``policy``): with p the (calibrated, if the Decider has a file) option
probabilities and o* = argmax p,

    act  iff  not never_auto(o*)  and  p[o*] >= threshold(o*)      threshold(o) = option's own, else the preset's

``threshold`` always means this, here and in the LangChain router: a bound on p* = p[o*], the
chosen option's probability (not on a confidence formula).

``answer_preset`` asks a preset's question in process; the server's preset endpoint runs its two
steps (``prepare_preset``, then ``PresetCall.result``) around the micro-batcher.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..compiler import LABEL_MODES, LabelMode
from ..errors import InvalidRequestError, TypedDecisionsError
from ..schema import Content, DecisionResponse, json_sha256
from .spec import OptionSpec, QuestionSpec

if TYPE_CHECKING:
    from ..decider import Decider

__all__ = ["Preset", "PresetExample", "PresetOption", "PresetQuestion", "Policy", "PresetError", "load_preset", "list_presets",
           "content_hash", "answer_preset", "decide_action", "preset_file", "PresetCall", "prepare_preset"]

REGISTRY = "_registry.json"
PARAMS = ("label_mode", "threshold", "debias")  # the params answer_preset accepts


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

    @model_validator(mode="after")
    def _examples_answer_options(self) -> Preset:
        names = [o.name for o in self.question.options]
        for i, ex in enumerate(self.examples):
            if ex.answer not in names:
                raise ValueError(f"examples.{i}.answer: {ex.answer!r} is not an option of the question ({names})")
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


def content_hash(data: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a preset's parsed content (``schema.json_sha256``).

    >>> content_hash({"b": 1, "a": "é"}) == content_hash({"a": "é", "b": 1})
    True
    """
    return json_sha256(data)


def _folder() -> Path:
    return Path(str(resources.files("typed_decisions.evaluation") / "presets_data"))


def preset_file(name: str) -> Path:
    """Where a shipped preset's JSON lives (whether or not it exists)."""
    return _folder() / f"{name}.json"


def _registry() -> dict[str, dict[str, str]]:
    return json.loads((_folder() / REGISTRY).read_text(encoding="utf-8"))


def list_presets() -> list[str]:
    """Names of the shipped presets."""
    return sorted(p.stem for p in _folder().glob("*.json") if not p.name.startswith("_"))


def _parse(data: Any, where: str) -> Preset:
    try:
        return Preset.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = ".".join(map(str, err["loc"]))
        raise PresetError(f"{where}: {loc + ': ' if loc else ''}{err['msg'].removeprefix('Value error, ')}") from None


def load_preset(name: str | Path) -> Preset:
    """A shipped preset by name (content checked against the version registry), or a JSON file path
    (not checked: your own presets are versioned by you)."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return _parse(json.loads(path.read_text(encoding="utf-8")), str(path))
    if str(name) not in list_presets():
        raise PresetError(f"unknown preset {str(name)!r}; shipped: {', '.join(list_presets())} (or give a .json path)")
    data = json.loads(preset_file(str(name)).read_text(encoding="utf-8"))
    preset = _parse(data, f"preset {name}")
    if preset.name != name:
        raise PresetError(f"preset file {name}.json declares name {preset.name!r}; they must agree")
    registered = _registry().get(preset.name, {}).get(str(preset.version))
    actual = content_hash(data)
    if registered != actual:
        raise PresetError(
            f"preset {name!r} version {preset.version} does not match the hash registered for that version "
            f"({registered or 'none registered'}; content is {actual}). Wording changes need a new version: "
            f"bump 'version' and add the hash to presets_data/{REGISTRY} (typed-decisions presets hash {name})")
    return preset


def decide_action(preset: Preset, probs: np.ndarray, threshold: float | None = None) -> dict[str, Any]:
    """The policy (module docstring) on option probabilities p, in option order.

    ``threshold`` overrides the preset's default (not the options' own thresholds).
    """
    i = int(np.argmax(probs))
    opt = preset.question.options[i]
    t = opt.threshold if opt.threshold is not None else (threshold if threshold is not None else preset.policy.threshold)
    p = float(probs[i])
    if opt.never_auto:
        auto, reason = False, f"{opt.name!r} is never acted on automatically"
    elif p >= t:
        auto, reason = True, f"p({opt.name}) = {p:.3f} >= {t:g}"
    else:
        auto, reason = False, f"p({opt.name}) = {p:.3f} < {t:g}: ask a person"
    return {"auto": auto, "option": opt.name, "probability": p, "threshold": t, "reason": reason}


@dataclass(frozen=True)
class PresetCall:
    """A preset question made ready for the decider: the wire request, its label mode, and the
    threshold override to apply to the answer (``prepare_preset`` builds it, ``result`` reads the
    answer). The server queues ``request`` like any ``/v1/systemone`` request."""

    preset: Preset
    request: dict[str, Any]
    label_mode: LabelMode | None
    threshold: float | None

    def result(self, response: DecisionResponse) -> dict[str, Any]:
        """{answers, act, preset, preset_version, model} from the decider's response."""
        spec = self.preset.question_spec()
        ans = response.answers[spec.name]
        if spec.type == "noul":
            probs = np.array([ans.noul, 1.0 - ans.noul])  # type: ignore[union-attr]
        elif spec.type == "choice":
            probs = np.array([ans.probabilities[o] for o in spec.option_names])  # type: ignore[union-attr]
        else:
            probs = np.array([ans.probabilities[str(i)] for i in range(len(spec.options))])  # type: ignore[union-attr]
        return {"answers": {k: a.model_dump(exclude_none=True) for k, a in response.answers.items()},
                "act": decide_action(self.preset, probs, self.threshold), "preset": self.preset.name,
                "preset_version": self.preset.version, "model": response.model}


def prepare_preset(model: str, preset_name: str, state: Any,
                   params: Mapping[str, Any] | None = None) -> PresetCall:
    """Check the name and params, load the preset, build its wire request for ``model``.

    ``params``: ``label_mode`` ("auto" | "names" | "letters" | "mixture"), ``threshold`` (overrides
    the preset's default), ``debias`` ("none" | "rotate": the wire request's own ``debias`` field). Only shipped preset names are accepted (never a path); bad names and params raise
    ``InvalidRequestError`` (HTTP 422) naming the field.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise InvalidRequestError(f"unknown preset params {unknown}; allowed: {list(PARAMS)}", ("params", unknown[0]))
    if preset_name not in list_presets():  # shipped names only: a server must never open a client's path
        raise InvalidRequestError(f"unknown preset {preset_name!r}; shipped: {', '.join(list_presets())}", ("preset",))
    if params.get("label_mode", "auto") not in LABEL_MODES:
        raise InvalidRequestError(f"params.label_mode must be one of {', '.join(LABEL_MODES)}, got {params['label_mode']!r}",
                                  ("params", "label_mode"))
    threshold = params.get("threshold")
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 <= threshold <= 1):
        raise InvalidRequestError(f"params.threshold must be a number in [0, 1], got {threshold!r}", ("params", "threshold"))
    if params.get("debias", "none") not in ("none", "rotate"):
        raise InvalidRequestError(f"params.debias must be 'none' or 'rotate', got {params['debias']!r}",
                                  ("params", "debias"))
    preset = load_preset(preset_name)
    spec = preset.question_spec()
    request = spec.request(model, state)
    if preset.examples:
        request["examples"] = preset.wire_examples()
    if "debias" in params:
        request["debias"] = params["debias"]
    return PresetCall(preset=preset, request=request, label_mode=params.get("label_mode"),
                      threshold=threshold)


def answer_preset(decider: Decider, preset_name: str, state: Any,
                  params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ask a preset's question about ``state``: {answers, act, preset, preset_version, model}.

    ``params`` as in ``prepare_preset``. Calibration is the Decider's (a Decider built with a
    calibration file applies it here too). The server's preset endpoint does the same two steps
    with the micro-batcher in between.
    """
    call = prepare_preset(decider.name, preset_name, state, params)
    return call.result(decider.run(call.request, label_mode=call.label_mode))
