"""Asking a preset's question, and the policy for acting on its answer.

Acting automatically (``policy``): with p the option probabilities (calibrated: by the Decider's
file, else by the preset's entry for the model, ``selection.py``) and o* = argmax p,

    act  iff  not never_auto(o*)  and  p[o*] >= threshold(o*)      threshold(o) = option's own, else the preset's

``threshold`` always means this, here and in the LangChain router: a bound on p* = p[o*], the
chosen option's probability (not on a confidence formula). Thresholds apply to the calibrated
probabilities.

``answer_preset`` asks a preset's question in process; the server's preset endpoint runs its two
steps (``prepare_preset``, then ``PresetCall.result``) around the micro-batcher. A preset's fitted
head or calibration goes to the Decider with the request (``PresetCall.heads``): the Decider applies
it before its one reduction to an answer (``answers.py``), and ``result`` only reads that answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..calibration import FixedCalibration
from ..compiler import LABEL_MODES, LabelMode, resolve_label_mode
from ..debias import DEBIAS_MODES
from ..errors import InvalidRequestError
from ..explain import answer_probabilities
from ..fitted import FittedHead
from ..schema import DecisionResponse
from .preset import Preset, PresetCalibration
from .selection import DeciderSettings, select_calibration, select_head
from .store import list_presets, load_preset

if TYPE_CHECKING:
    from ..decider import Decider

__all__ = ["PARAMS", "PresetCall", "answer_preset", "decide_action", "prepare_preset"]

PARAMS = ("label_mode", "threshold", "debias", "calibration", "fitted")  # the params answer_preset accepts


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
    """A preset question made ready for the decider: the wire request, its label mode, the
    threshold override, and the preset's fitted head or calibration that the Decider applies to
    the answer (``prepare_preset`` builds it, ``heads`` hands them over, ``result`` reads the
    answer). The server queues ``request`` like any ``/v1/systemone`` request."""

    preset: Preset
    request: dict[str, Any]
    label_mode: LabelMode | None
    threshold: float | None
    calibration: PresetCalibration | None = None
    calibration_note: str = "none"
    head: FittedHead | None = None

    @property
    def heads(self) -> dict[str, FittedHead | FixedCalibration] | None:
        """What to pass to ``Decider.run_many(heads=[...])`` for this call: the preset's fitted head,
        or its calibration fixed with the note the answer carries (None: the zero-shot readout and
        the Decider's own file, if any)."""
        name = self.preset.question.name
        if self.head is not None:
            return {name: self.head}
        if self.calibration is not None:
            return {name: self.calibration.fixed(self.calibration_note)}
        return None

    def result(self, response: DecisionResponse) -> dict[str, Any]:
        """{answers, act, preset, preset_version, model, calibration} from the decider's response
        (its answer already calibrated or answered by the head: ``heads``)."""
        spec = self.preset.question_spec()
        ans = response.answers[spec.name]
        keys = spec.option_names if spec.type == "choice" else [str(i) for i in range(len(spec.options))]
        probs = answer_probabilities(ans, keys)  # the policy reads the answer's p, in option order
        return {"answers": {k: a.model_dump(exclude_none=True) for k, a in response.answers.items()},
                "act": decide_action(self.preset, probs, self.threshold), "preset": self.preset.name,
                "preset_version": self.preset.version, "model": response.model,
                "calibration": self.calibration_note}


def prepare_preset(model: str, preset_name: str | Preset, state: Any,
                   params: Mapping[str, Any] | None = None, *, decider: Any = None) -> PresetCall:
    """Check the name and params, load the preset, build its wire request for ``model``.

    ``params``: ``label_mode`` ("auto" | "names" | "letters" | "mixture"), ``threshold`` (overrides
    the preset's default), ``debias`` ("none" | "canonical" | "rotate": the wire request's own ``debias`` field),
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
    if params.get("debias", "none") not in DEBIAS_MODES:
        raise InvalidRequestError(f"params.debias must be one of {', '.join(map(repr, DEBIAS_MODES))}, "
                                  f"got {params['debias']!r}",
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
    if head is not None and "debias" not in params and head.debias != settings.reading.debias:
        request["debias"] = head.debias  # read the question as the head was fitted (fit reads choices canonically)
    if head is not None:  # the head was fitted on raw probabilities: no calibration on top
        cal, note = None, head_note
        if hasattr(decider, "check_heads"):  # a real Decider: export, prompt and reading, before queueing
            decider.check_heads(request, {spec.name: head}, label_mode=params.get("label_mode"),
                                debias=params.get("debias"))
    else:
        cal, note = select_calibration(
            preset, settings, labels=resolve_label_mode(spec.type, params.get("label_mode") or settings.reading.label_mode),
            debias=params.get("debias") or settings.reading.debias, wanted=params.get("calibration", "preset") == "preset")
        if head_note:
            note = f"{head_note}; calibration {note}"
    return PresetCall(preset=preset, request=request, label_mode=params.get("label_mode"),
                      threshold=threshold, calibration=cal, calibration_note=note, head=head)


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
