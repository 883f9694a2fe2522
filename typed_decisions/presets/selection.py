"""Which calibration or fitted head a preset call uses, and what the answer says about it.

Calibration (``Preset.calibration``: model key → ``PresetCalibration``): a calibration fitted on the
preset's own dataset for one model (``typed-decisions calibrate --preset NAME --to-preset FILE``;
a calibration fitted on other tasks does not transfer, docs/evaluation.md). A preset call applies
the entry for the Decider's model when (key: ``Decider.name``, plus ``:int8`` for an INT8 export,
whose name is its float model's: its probabilities drift, so it is fitted on its own)

    the call did not pass params.calibration = "none",
    the Decider has no calibration file of its own     (an explicit Decider file wins: never two
                                                        calibrations stacked, both were fitted on raw p)
    the call reads the question as the fit did          (resolved label mode, debias, wording)

and the answer's ``calibration`` says what was applied (or why nothing was). A fitted head
(``Preset.fitted``, ``select_head``) answers instead of the zero-shot readout and of any
calibration; a preset with heads, but none for this model, is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..compiler import QuestionLabels
from ..errors import InvalidRequestError
from ..fitted import FittedHead
from ..reducers import DEFAULT_CONFIDENCE, ConfidenceKind
from ..schema import Debias
from ..settings import Settings
from .preset import Preset, PresetCalibration

__all__ = ["DeciderSettings", "select_calibration", "select_head"]


@dataclass(frozen=True)
class DeciderSettings:
    """What a preset answer depends on beyond the model's name: the Decider's defaults (label mode,
    debias, wording, confidence formula), its own calibration file, and whether the export is
    quantized (``key``: the name a preset's calibrations are keyed by). ``of(decider)`` reads them
    (or takes the ``preset_settings`` of a stand-in such as Ray's ``RemoteDecider``, which holds no
    Decider itself); a bare model name gets the defaults and no file.

    >>> DeciderSettings("qwen2.5-coder-1.5b", quantized="int8").key
    'qwen2.5-coder-1.5b:int8'
    """

    name: str
    reading: Settings = Settings()  # the Decider's default reading: label mode, debias, wording, calibration file
    confidence: ConfidenceKind = DEFAULT_CONFIDENCE
    quantized: str | None = None  # "int8" for an INT8 export (its manifest's weight type)

    @property
    def key(self) -> str:
        return self.name if self.quantized is None else f"{self.name}:{self.quantized}"

    @classmethod
    def of(cls, decider: Any) -> DeciderSettings:
        own = getattr(decider, "preset_settings", None)  # a stand-in for a remote Decider carries its replicas'
        if isinstance(own, cls):
            return own
        quant = getattr(getattr(decider, "artifacts", None), "quantization", None)
        reading = decider.settings() if callable(getattr(decider, "settings", None)) else Settings()
        return cls(name=decider.name, reading=reading,
                   confidence=getattr(decider, "confidence_kind", DEFAULT_CONFIDENCE),
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
    if decider.reading.calibration is not None:
        f = decider.reading.calibration
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
    call_reading = (labels, debias, decider.reading.wording)
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
