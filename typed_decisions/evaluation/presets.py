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

Acting automatically (``policy``): with p the option probabilities (calibrated: by the Decider's
file, else by the preset's entry for the model, see below) and o* = argmax p,

    act  iff  not never_auto(o*)  and  p[o*] >= threshold(o*)      threshold(o) = option's own, else the preset's

``threshold`` always means this, here and in the LangChain router: a bound on p* = p[o*], the
chosen option's probability (not on a confidence formula).

``answer_preset`` asks a preset's question in process; the server's preset endpoint runs its two
steps (``prepare_preset``, then ``PresetCall.result``) around the micro-batcher.

Calibration (``calibration``: model name → ``PresetCalibration``): a calibration fitted on the
preset's own dataset for one model (``typed-decisions calibrate --preset NAME --to-preset FILE``;
a calibration fitted on other tasks does not transfer, docs/evaluation.md). A preset call applies
the entry for the Decider's model when (key: ``Decider.name``, plus ``:int8`` for an INT8 export,
whose name is its float model's: its probabilities drift, so it is fitted on its own)

    the call did not pass params.calibration = "none",
    the Decider has no calibration file of its own     (an explicit Decider file wins: never two
                                                        calibrations stacked, both were fitted on raw p)
    the call reads the question as the fit did          (resolved label mode, debias, wording)

and the answer's ``calibration`` says what was applied (or why nothing was). Thresholds then apply
to the calibrated probabilities.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import reducers
from ..calibration import CalibrationFile, TypeCalibration, calibrate
from ..compiler import LABEL_MODES, LabelMode, QuestionLabels, resolve_label_mode
from ..errors import InvalidRequestError, TypedDecisionsError
from ..fitted import FittedHead
from ..reducers import DEFAULT_CONFIDENCE, ConfidenceKind
from ..schema import Content, Debias, DecisionResponse, json_sha256
from .spec import OptionSpec, QuestionSpec

if TYPE_CHECKING:
    from ..decider import Decider

__all__ = ["Preset", "PresetExample", "PresetOption", "PresetQuestion", "Policy", "PresetError", "load_preset",
           "list_presets", "content_hash", "answer_preset", "decide_action", "preset_file", "PresetCall",
           "prepare_preset", "PresetCalibration", "PresetFit", "DeciderSettings", "select_calibration",
           "with_calibration", "register_preset", "examples_hash", "select_head", "with_head"]

REGISTRY = "_registry.json"
PARAMS = ("label_mode", "threshold", "debias", "calibration", "fitted")  # the params answer_preset accepts


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


def with_calibration(data: Mapping[str, Any], model: str, cal: PresetCalibration, *, bump: bool = False
                     ) -> dict[str, Any]:
    """A preset's parsed JSON with ``cal`` as its calibration for ``model`` (replacing any there),
    the version bumped by one if ``bump`` (a shipped preset's content changes); parsed to check it.

    >>> d = {"name": "x", "version": 1, "question": {"name": "q", "type": "noul",
    ...      "options": [{"name": "yes"}, {"name": "no"}]}}
    >>> out = with_calibration(d, "m", PresetCalibration(temperature=0.25, labels="names"), bump=True)
    >>> out["version"], out["calibration"]["m"]["temperature"], "calibration" in d
    (2, 0.25, False)
    """
    out = json.loads(json.dumps(dict(data)))  # a deep copy; the input stays as it was
    out["calibration"] = {**(out.get("calibration") or {}), model: cal.model_dump(mode="json", exclude_none=True)}
    if bump:
        out["version"] = int(out["version"]) + 1
    _parse(out, f"preset {out.get('name')}")
    return out


def with_head(data: Mapping[str, Any], head: FittedHead, *, bump: bool = False) -> dict[str, Any]:
    """A preset's parsed JSON with ``head`` as its fitted head for ``head.model`` (replacing any
    there), the version bumped by one if ``bump``; parsed to check it."""
    out = json.loads(json.dumps(dict(data)))
    out["fitted"] = {**(out.get("fitted") or {}), head.model: head.model_dump(mode="json", exclude_none=True)}
    if bump:
        out["version"] = int(out["version"]) + 1
    _parse(out, f"preset {out.get('name')}")
    return out


def register_preset(data: Mapping[str, Any]) -> str:
    """Ship a preset version: write ``presets_data/NAME.json`` and add its content hash to the
    registry (other versions' entries kept). Refuses a version already registered with another
    hash (that version's numbers would silently change). Returns the hash."""
    preset = _parse(data, f"preset {data.get('name')}")
    if not preset.name or "/" in preset.name or preset.name.startswith(("_", ".")):
        raise PresetError(f"name: {preset.name!r} cannot be a preset file name")
    registry, digest = _registry(), content_hash(data)
    old = registry.get(preset.name, {}).get(str(preset.version))
    if old is not None and old != digest:
        raise PresetError(f"version: {preset.name} version {preset.version} is registered with another content "
                          f"hash ({old}); bump 'version'")
    preset_file(preset.name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    registry.setdefault(preset.name, {})[str(preset.version)] = digest
    (_folder() / REGISTRY).write_text(json.dumps(registry, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return digest


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
class DeciderSettings:
    """What a preset answer depends on beyond the model's name: the Decider's defaults (label mode,
    debias, wording, confidence formula), its own calibration file, and whether the export is
    quantized (``key``: the name a preset's calibrations are keyed by). ``of(decider)`` reads them;
    a bare model name gets the defaults and no file.

    >>> DeciderSettings("qwen2.5-coder-1.5b", quantized="int8").key
    'qwen2.5-coder-1.5b:int8'
    """

    name: str
    label_mode: LabelMode = "auto"
    debias: Debias = "none"
    wording: str = "default"
    confidence: ConfidenceKind = DEFAULT_CONFIDENCE
    calibration: CalibrationFile | None = None
    quantized: str | None = None  # "int8" for an INT8 export (its manifest's weight type)

    @property
    def key(self) -> str:
        return self.name if self.quantized is None else f"{self.name}:{self.quantized}"

    @classmethod
    def of(cls, decider: Any) -> DeciderSettings:
        quant = getattr(getattr(decider, "artifacts", None), "quantization", None)
        return cls(name=decider.name, label_mode=getattr(decider, "label_mode", "auto"),
                   debias=getattr(decider, "debias", "none"),
                   wording=getattr(getattr(decider, "compiler", None), "wording_name", "default"),
                   confidence=getattr(decider, "confidence_kind", DEFAULT_CONFIDENCE),
                   calibration=getattr(decider, "calibration", None),
                   quantized=str(quant.get("weight_type", "int8")) if isinstance(quant, dict) else None)


def select_calibration(preset: Preset, decider: DeciderSettings, *, labels: QuestionLabels, debias: Debias,
                       wanted: bool = True) -> tuple[PresetCalibration | None, str]:
    """(the preset calibration to apply or None, what the answer reports) for one call.

    ``labels``/``debias``: how this call reads the question (resolved). Precedence: the call's
    ``calibration="none"``, then the Decider's own file (it wins; never stacked), then the preset's
    entry for ``decider.key`` if it was fitted under the same reading.

    >>> p = Preset.model_validate({"name": "x", "version": 1, "question": {"name": "q", "type": "noul",
    ...     "options": [{"name": "yes"}, {"name": "no"}]}, "calibration": {"m": {"temperature": 0.5, "labels": "names"}}})
    >>> select_calibration(p, DeciderSettings("m"), labels="names", debias="none")[1]
    'preset x v1 for m: T=0.5'
    >>> select_calibration(p, DeciderSettings("other"), labels="names", debias="none")[1]
    'none: preset x v1 has no calibration for other (fitted for: m)'
    """
    where = f"preset {preset.name} v{preset.version}"
    if not wanted:
        return None, "none: params.calibration is 'none'"
    if decider.calibration is not None:
        f = decider.calibration
        tc = f.for_type(preset.question.type)
        own = (f"T={tc.temperature:g}" + (", contextual" if tc.contextual else "")
               if tc.temperature != 1.0 or tc.contextual else f"no entry for {preset.question.type} questions, uncalibrated")
        return None, f"decider file {f.model}@v{f.version}: {own} (a Decider's own file wins over {where}'s calibration)"
    model = decider.key
    cal = (preset.calibration or {}).get(model)
    if cal is None:
        fitted = ", ".join(sorted(preset.calibration or {})) or "none"
        return None, f"none: {where} has no calibration for {model} (fitted for: {fitted})"
    fit_reading = (cal.labels, cal.debias, cal.wording)
    call_reading = (labels, debias, decider.wording)
    if fit_reading != call_reading:
        return None, (f"none: {where}'s calibration for {model} was fitted reading the question with "
                      f"labels/debias/wording {'/'.join(fit_reading)}; this call reads {'/'.join(call_reading)}")
    return cal, f"{where} for {model}: {cal.describe()}"


def select_head(preset: Preset, decider: DeciderSettings, *, wanted: bool = True) -> tuple[FittedHead | None, str]:
    """(the fitted head to answer with or None, what the answer reports). A preset with fitted heads
    but none for this model is refused (InvalidRequestError at params.fitted): its numbers were measured with a head, and
    answering zero-shot instead would be a quieter, worse answer. ``params.fitted = "none"`` asks
    for the zero-shot readout explicitly. (Export, prompt and reading are checked by the Decider,
    ``Decider.check_heads``.)"""
    where = f"preset {preset.name} v{preset.version}"
    if not preset.fitted:
        return None, ""
    if not wanted:
        return None, "none: params.fitted is 'none' (zero-shot readout)"
    head = preset.fitted.get(decider.key)
    if head is None:
        raise InvalidRequestError(
            f"{where} has fitted heads for {', '.join(sorted(preset.fitted))}, not for {decider.key}: fit one "
            f"(typed-decisions fit --model ... --preset {preset.name} --out FILE), or send params.fitted = 'none' "
            "for the zero-shot readout", ("params", "fitted"))
    return head, f"{where} for {decider.key}: fitted head {head.id}"


def _reduce(spec: QuestionSpec, p: np.ndarray, confidence: ConfidenceKind, answer: Any) -> Any:
    """The answer for option probabilities p, as ``Decider`` builds it from its calibrated p
    (a score keeps ``answer``'s legend)."""
    if spec.type == "noul":
        return reducers.reduce_noul(p)
    if spec.type == "choice":
        return reducers.reduce_choice(p, spec.option_names, confidence)
    return reducers.reduce_score(p, [answer.legend[str(i)] for i in range(p.size)], confidence)


@dataclass(frozen=True)
class PresetCall:
    """A preset question made ready for the decider: the wire request, its label mode, the
    threshold override, and the preset calibration to apply to the answer (``prepare_preset``
    builds it, ``result`` reads the answer). The server queues ``request`` like any
    ``/v1/systemone`` request."""

    preset: Preset
    request: dict[str, Any]
    label_mode: LabelMode | None
    threshold: float | None
    calibration: PresetCalibration | None = None
    calibration_note: str = "none"
    confidence: ConfidenceKind = DEFAULT_CONFIDENCE
    head: FittedHead | None = None

    @property
    def heads(self) -> dict[str, FittedHead] | None:
        """The fitted heads to pass to ``Decider.run_many`` for this call (None: zero-shot)."""
        return None if self.head is None else {self.preset.question.name: self.head}

    def result(self, response: DecisionResponse) -> dict[str, Any]:
        """{answers, act, preset, preset_version, model, calibration} from the decider's response."""
        spec = self.preset.question_spec()
        ans = response.answers[spec.name]
        if spec.type == "noul":
            probs = np.array([ans.noul, 1.0 - ans.noul])  # type: ignore[union-attr]
        elif spec.type == "choice":
            probs = np.array([ans.probabilities[o] for o in spec.option_names])  # type: ignore[union-attr]
        else:
            probs = np.array([ans.probabilities[str(i)] for i in range(len(spec.options))])  # type: ignore[union-attr]
        answers = dict(response.answers)
        if self.calibration is not None:
            probs = self.calibration.apply(probs)
            new = _reduce(spec, probs, self.confidence, ans)
            new.label_mass, new.calibration = ans.label_mass, self.calibration_note
            answers[spec.name] = new
        return {"answers": {k: a.model_dump(exclude_none=True) for k, a in answers.items()},
                "act": decide_action(self.preset, probs, self.threshold), "preset": self.preset.name,
                "preset_version": self.preset.version, "model": response.model,
                "calibration": self.calibration_note}


def prepare_preset(model: str, preset_name: str | Preset, state: Any,
                   params: Mapping[str, Any] | None = None, *, decider: Any = None) -> PresetCall:
    """Check the name and params, load the preset, build its wire request for ``model``.

    ``params``: ``label_mode`` ("auto" | "names" | "letters" | "mixture"), ``threshold`` (overrides
    the preset's default), ``debias`` ("none" | "rotate": the wire request's own ``debias`` field),
    ``calibration`` ("preset", the default: apply the preset's calibration for this model if it has
    one; "none": raw probabilities), ``fitted`` ("preset", the default: answer with the preset's
    fitted head for this model — a preset with heads for other models only is refused; "none": the
    zero-shot readout). Only shipped preset names are accepted (never a path; a
    ``Preset`` object from Python is fine); bad names and params raise ``InvalidRequestError``
    (HTTP 422) naming the field. ``decider``: the Decider (or ``DeciderSettings``) that will answer:
    its defaults and own calibration file decide which calibration applies (``select_calibration``).
    """
    params = dict(params or {})
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise InvalidRequestError(f"unknown preset params {unknown}; allowed: {list(PARAMS)}", ("params", unknown[0]))
    if not isinstance(preset_name, Preset) and preset_name not in list_presets():  # shipped names only: a server must never open a client's path
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
    for field in ("calibration", "fitted"):
        if params.get(field, "preset") not in ("preset", "none"):
            raise InvalidRequestError(f"params.{field} must be 'preset' or 'none', got {params[field]!r}",
                                      ("params", field))
    preset = preset_name if isinstance(preset_name, Preset) else load_preset(preset_name)
    spec = preset.question_spec()
    request = spec.request(model, state)
    if preset.examples:
        request["examples"] = preset.wire_examples()
    if "debias" in params:
        request["debias"] = params["debias"]
    settings = (decider if isinstance(decider, DeciderSettings)
                else DeciderSettings(model) if decider is None else DeciderSettings.of(decider))
    head, head_note = select_head(preset, settings, wanted=params.get("fitted", "preset") == "preset")
    if head is not None:  # the head was fitted on raw probabilities: no calibration on top
        cal, note = None, head_note
        if hasattr(decider, "check_heads"):  # a real Decider: export, prompt and reading, before queueing
            decider.check_heads(request, {spec.name: head}, label_mode=params.get("label_mode"),
                                debias=params.get("debias"))
    else:
        cal, note = select_calibration(
            preset, settings, labels=resolve_label_mode(spec.type, params.get("label_mode") or settings.label_mode),
            debias=params.get("debias") or settings.debias, wanted=params.get("calibration", "preset") == "preset")
        if head_note:
            note = f"{head_note}; calibration {note}"
    return PresetCall(preset=preset, request=request, label_mode=params.get("label_mode"),
                      threshold=threshold, calibration=cal, calibration_note=note, confidence=settings.confidence,
                      head=head)


def answer_preset(decider: Decider, preset_name: str | Preset, state: Any,
                  params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ask a preset's question about ``state``: {answers, act, preset, preset_version, model, calibration}.

    ``params`` as in ``prepare_preset``. Calibration: the preset's entry for ``decider.name``, unless
    the Decider has its own calibration file (that one is applied, by the Decider, instead); the
    ``calibration`` string says which (module docstring). The server's preset endpoint does the
    same two steps with the micro-batcher in between.
    """
    call = prepare_preset(decider.name, preset_name, state, params, decider=decider)
    if call.heads is None:
        return call.result(decider.run(call.request, label_mode=call.label_mode))
    (response,) = decider.run_many([call.request], label_mode=call.label_mode, heads=[call.heads])
    return call.result(response)
