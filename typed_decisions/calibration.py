"""Calibration applied at decide time: temperature scaling, contextual calibration, the file.

`readout.py` produces option probabilities p; this file adjusts them after the fact, per question
type (choice / score / noul). Numpy + pydantic only. The file it reads (`CalibrationFile`) is
versioned JSON. Fitting a calibration on labelled data, and the metrics that judge it, are
evaluation tooling: `evaluation/calibration_fitting.py` and `evaluation/metrics.py`.

    temperature       p_T = softmax(log p / T)                 T > 1 flattens, T < 1 sharpens
    contextual        p_c  ∝ p / p_cf                          p_cf: probabilities for a content-free
                                                               state (Zhao et al. 2021, "Calibrate
                                                               Before Use")
    combined          p_out = softmax(log(p / p_cf) / T)       contextual first, then temperature
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .readout import as_probabilities

__all__ = ["apply_temperature", "contextual_calibrate", "calibrate", "TypeCalibration", "CalibrationFile",
           "FixedCalibration"]

QuestionType = Literal["choice", "score", "noul"]


def _softmax_log(logp: np.ndarray) -> np.ndarray:
    """softmax of log-probabilities (entries may be -inf), max-subtracted."""
    e = np.exp(logp - logp.max())
    return e / e.sum()


# -----------------------------------------------------------------------------
# transforms


def apply_temperature(probs: ArrayLike, temperature: float) -> np.ndarray:
    """p_T = softmax(log p / T). Zeros stay zero; T = 1 returns p (renormalized).

    >>> apply_temperature([0.8, 0.2], 2.0).round(4).tolist()      # sqrt(.8) : sqrt(.2) = 2 : 1
    [0.6667, 0.3333]
    """
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    p = as_probabilities(probs, normalized=False)
    with np.errstate(divide="ignore"):
        logp = np.log(p)  # (k,) -inf where p == 0
    return _softmax_log(logp / temperature)


def contextual_calibrate(probs: ArrayLike, content_free: ArrayLike) -> np.ndarray:
    """p_c ∝ p / p_cf (Zhao et al. 2021: W = diag(p_cf)^-1, b = 0, then normalized).

    The paper writes q = softmax(W p + b) and its code takes argmax(W p); we normalize W p
    directly, which divides out the model's prior for each option and keeps a distribution.
    The argmax is the same in all three forms.

    >>> contextual_calibrate([0.6, 0.4], [0.75, 0.25]).round(4).tolist()   # .8 : 1.6 = 1 : 2
    [0.3333, 0.6667]
    """
    p, cf = as_probabilities(probs, normalized=False), as_probabilities(content_free, normalized=False)
    if p.shape != cf.shape:
        raise ValueError(f"content-free probabilities have {cf.size} entries, the question has {p.size}")
    if (cf <= 0).any():
        raise ValueError("content-free probabilities must all be > 0 to divide by them")
    q = p / cf
    return q / q.sum()


def calibrate(probs: ArrayLike, temperature: float = 1.0, content_free: ArrayLike | None = None) -> np.ndarray:
    """Contextual calibration (if content_free is given), then temperature scaling.

    >>> calibrate([0.6, 0.4], temperature=0.5, content_free=[0.75, 0.25]).round(4).tolist()  # 1 : 4
    [0.2, 0.8]
    """
    p = as_probabilities(probs, normalized=False)
    if content_free is not None:
        p = contextual_calibrate(p, content_free)
    return apply_temperature(p, temperature)


@dataclass(frozen=True)
class FixedCalibration:
    """One question's calibration, fixed before the call: a preset's entry for the model
    (``PresetCalibration.fixed``), whose p_cf was read when it was fitted. The Decider applies it
    where it would apply a fitted head (``answers.py``); ``note`` is what the answer's
    ``calibration`` field then says.

    >>> FixedCalibration(0.5, (0.75, 0.25), "preset x v1 for m: T=0.5, contextual").apply([0.6, 0.4]).round(4).tolist()
    [0.2, 0.8]
    """

    temperature: float
    content_free: tuple[float, ...] | None  # p_cf in option order, when contextual
    note: str

    def apply(self, probs: ArrayLike) -> np.ndarray:
        """``calibrate``: p / p_cf (if contextual), then temperature."""
        return calibrate(probs, self.temperature, self.content_free)


# -----------------------------------------------------------------------------
# the calibration file


class TypeCalibration(BaseModel):
    """Calibration of one question type."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, gt=0, description="T in softmax(log p / T); 1 = unchanged")
    contextual: bool = Field(False, description="divide by the content-free probabilities first")


class CalibrationFile(BaseModel):
    """Versioned calibration file (JSON), one per model.

    {"version": 1, "model": "qwen2.5-coder-1.5b-instruct", "created": "2025-01-01T00:00:00Z",
     "per_type": {"choice": {"temperature": 1.3, "contextual": true}},
     "content_free_state": "N/A", "notes": ""}

    A type absent from per_type is left uncalibrated (T = 1, not contextual).
    """

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    model: str = Field(description="name of the exported model the values were fitted on")
    created: str = Field(description="ISO-8601 timestamp of the fit")
    per_type: dict[QuestionType, TypeCalibration] = Field(default_factory=dict)
    content_free_state: str | None = Field(
        None, description="the state text used to get p_cf (e.g. 'N/A'); required if any type is contextual"
    )
    notes: str = ""

    @model_validator(mode="after")
    def _contextual_needs_state(self) -> CalibrationFile:
        ctx = [t for t, c in self.per_type.items() if c.contextual]
        if ctx and self.content_free_state is None:
            raise ValueError(f"per_type {ctx} use contextual calibration; set content_free_state (e.g. 'N/A')")
        return self

    def for_type(self, qtype: QuestionType) -> TypeCalibration:
        return self.per_type.get(qtype, TypeCalibration())

    @classmethod
    def load(cls, path: str | Path) -> CalibrationFile:
        return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
