"""A fitted readout: a small linear head over what the engine already computes for a question.

Zero-shot, a question's option probabilities are the restricted softmax of the label tokens'
logits (``readout.py``). A task with labelled rows can do better without fine-tuning the LM and
without a longer prompt: the engine already has the hidden state h (H,) at the answer position —
the last prompt token, where the first label token is read — and the zero-shot log-probabilities
log p (K,) of the options. A multinomial logistic head over both,

    z      = (h − μ) / σ                       standardized hidden state (μ, σ per dimension, from the rows)
    x      = [ log p₀ … log p_{K−1} ,  z ]      log p clipped at log 1e-12, options in the head's class order
    logits = W x + b                           W (C, K + H), b (C,)
    p̂      = softmax(logits)                   float64, max subtracted (readout.restricted_softmax)

costs one (C × (K + H)) product per answer and no extra forward pass. Fitting it (PCA, L2
logistic regression, the regularisation chosen by cross-validation: ``head_regression.py``, driven by
``heads.fit``) folds
the projection into W, so serving needs only these arrays.

A head is valid only for what it was fitted on, and says so (``FittedHead.refusal``): the export
(``export_sha256``: the hashes of its files, so an INT8 export is not its float model), the prompt
(``prompt_sha256``: the question compiled with a placeholder state, options in class order — the
template, wording, label mode and question text), and the reading (label mode, debias).
The rows it was fitted on are recorded by hash (``rows_sha256``).

This module is numpy + pydantic only (the core never needs scikit-learn to serve a head).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, model_validator

from .readout import restricted_softmax
from .schema import Debias

__all__ = ["FittedHead", "FitReport", "HEAD_FORMAT", "LOG_FLOOR", "behind_zero_shot", "encode_array",
           "decode_array", "head_features"]

HEAD_FORMAT = "typed-decisions/fitted-head"
LOG_FLOOR = float(np.log(1e-12))  # log p below this is clipped: a zero-shot 0 must not be -inf


def encode_array(a: np.ndarray) -> dict[str, Any]:
    """A float64 array as JSON: ``{"shape": [...], "float64": base64 of its little-endian bytes}``
    (exact, and ~3x smaller than decimal text).

    >>> decode_array(encode_array(np.array([[1.5, -2.0]]))).tolist()
    [[1.5, -2.0]]
    """
    a = np.ascontiguousarray(a, dtype="<f8")
    return {"shape": list(a.shape), "float64": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    if not isinstance(value, dict) or set(value) != {"shape", "float64"}:
        raise ValueError('an array is {"shape": [...], "float64": "<base64>"}')
    shape = [int(s) for s in value["shape"]]
    try:
        raw = base64.b64decode(value["float64"], validate=True)
    except (ValueError, TypeError) as e:
        raise ValueError(f"float64: not base64 ({e})") from None
    if len(raw) != 8 * int(np.prod(shape)):
        raise ValueError(f"float64: {len(raw)} bytes do not hold an array of shape {shape}")
    a = np.frombuffer(raw, dtype="<f8").reshape(shape).astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError("the array holds NaN or infinity")
    return a


Array = Annotated[np.ndarray, PlainValidator(decode_array), PlainSerializer(encode_array, return_type=dict)]


def behind_zero_shot(cv_gain: Sequence[float] | None, cv_nll: float | None, zero_shot_cv_nll: float | None) -> bool:
    """Whether a head's own cross-validation finds it behind the zero-shot reading on the rows'
    held-out answers: a higher log-loss (what the fit minimises), or fewer right answers beyond the
    paired interval (its upper end below 0). A row or two fewer right with a better log-loss is
    not behind. False without CV (nothing measured).

    >>> behind_zero_shot([-0.2, -0.3, -0.05], 0.5, 0.6), behind_zero_shot([0.0, -0.1, 0.1], 0.7, 0.6)
    (True, True)
    >>> behind_zero_shot([-0.033, -0.1, 0.0], 0.07, 0.27)
    False
    """
    if cv_gain is None:
        return False
    return cv_gain[2] < 0 or (cv_nll is not None and zero_shot_cv_nll is not None and cv_nll > zero_shot_cv_nll + 1e-12)


def head_features(hidden: np.ndarray, log_probs: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x = [clip(log p), (h − μ) / σ] for one row (1-D) or many (2-D, one row per line)."""
    lp = np.maximum(np.asarray(log_probs, dtype=np.float64), LOG_FLOOR)
    z = (np.asarray(hidden, dtype=np.float64) - mean) / scale
    return np.concatenate([lp, z], axis=-1)


class FitReport(BaseModel):
    """How a head was fitted (informative; what ``typed-decisions fit`` printed)."""

    model_config = ConfigDict(extra="forbid")
    rows: int = Field(ge=1)
    rows_per_class: dict[str, int]
    components: int = Field(ge=1, description="PCA dimensions of the standardized hidden state fitted on")
    method: Literal["anchored", "free"] = Field(
        "free", description="anchored: fitted from the zero-shot reading, L2 toward it; free: L2 toward 0 "
                            "(head_regression.py)")
    l2: float | None = Field(gt=0, description="the chosen regularisation: anchored, its strength λ (None: "
                                               "infinite, the rows moved nothing and the head is the zero-shot "
                                               "reading); free, the inverse strength C")
    zero_shot_cv_nll: float | None = Field(None, description="the zero-shot reading's log-loss on the same "
                                                             "held-out rows (anchored)")
    folds: int = Field(ge=0, description="cross-validation folds the regularisation was chosen with")
    cv_accuracy: float | None = None
    cv_nll: float | None = None
    zero_shot_cv_accuracy: float | None = Field(None, description="zero-shot accuracy on the same rows")
    cv_gain: list[float] | None = Field(None, description="held-out minus zero-shot accuracy on the same rows, "
                                        "[mean, 95 % low, high]: a paired bootstrap over the rows (a row's option "
                                        "orders resampled together)")
    rotations: int = Field(1, ge=1, description="option orders each choice row was read under")
    class_weight: Literal["balanced", "none"] = "balanced"
    prior: Literal["rows", "uniform"] | list[float] = Field(
        "rows", description="the class prior put into the bias: the rows' frequencies, uniform, or given")
    temperature: float = Field(1.0, gt=0, description="the logits were divided by it (fit calibrate='temperature': "
                                                      "fitted on the cross-validated predictions; 1: not calibrated)")
    seconds: float | None = None
    date: str = ""
    command: str = ""

    @property
    def behind_zero_shot(self) -> bool:
        """Its cross-validation found it behind the zero-shot reading (``behind_zero_shot``)."""
        return behind_zero_shot(self.cv_gain, self.cv_nll, self.zero_shot_cv_nll)


class FittedHead(BaseModel):
    """A linear head over [zero-shot log p, standardized hidden state] (module docstring)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    format: Literal["typed-decisions/fitted-head"] = HEAD_FORMAT
    version: Literal[1] = 1
    question_type: Literal["noul", "choice", "score"]
    classes: list[str] = Field(min_length=2, description="option keys as the question lists them when fitted "
                                                         "(choice: names; score: '0'..; noul: yes, no)")
    model: str = Field(description="the model key it was fitted for (Decider.name, + ':int8' for an INT8 export)")
    export_sha256: str = Field(description="schema.json_sha256 of the export manifest's file hashes")
    prompt_sha256: str = Field(description="the question's prompt with a placeholder state (prompt_sha256)")
    rows_sha256: str = Field(description="the labelled rows fitted on (states, question texts, gold options)")
    labels: str = Field(description="label mode the question was read with (resolved)")
    debias: Debias = "none"
    wording: str = "default"
    own_instructions: bool = Field(False, description="fitted on rows with their own question text: the prompt "
                                                      "identity holds a placeholder for the instructions")
    layers: list[int | Literal["last"]] = Field(
        default_factory=lambda: ["last"], min_length=1,
        description="the states it reads at the answer position, concatenated in this order: 'last' (the final "
                    "hidden state) or k (the residual stream after k layers, an export's hidden_state.k)")
    mean: Array
    scale: Array
    weights: Array
    bias: Array
    fitted: FitReport | None = None

    @model_validator(mode="after")
    def _shapes(self) -> FittedHead:
        c, h = len(self.classes), self.mean.shape[0] if self.mean.ndim == 1 else -1
        if len(set(map(str, self.layers))) != len(self.layers) or any(k != "last" and k < 1 for k in self.layers):
            raise ValueError(f"layers: distinct entries, each 'last' or a layer count >= 1, got {self.layers}")
        if h % len(self.layers):
            raise ValueError(f"mean: {h} values do not split into {len(self.layers)} equal states ({self.layers})")
        if len(set(self.classes)) != c:
            raise ValueError(f"classes: duplicate names in {self.classes}")
        if self.mean.ndim != 1 or self.scale.shape != self.mean.shape:
            raise ValueError(f"mean and scale: one value per hidden dimension, got {self.mean.shape} and {self.scale.shape}")
        if np.any(self.scale <= 0):
            raise ValueError("scale: every entry must be > 0 (it divides)")
        if self.weights.shape != (c, c + h):
            raise ValueError(f"weights: shape (classes, classes + hidden) = ({c}, {c + h}), got {self.weights.shape}")
        if self.bias.shape != (c,):
            raise ValueError(f"bias: shape ({c},), got {self.bias.shape}")
        return self

    @property
    def hidden_size(self) -> int:
        return int(self.mean.shape[0])

    @property
    def mid_layers(self) -> list[int]:
        """The mid-layer states it reads (the export must output ``hidden_state.k`` for each)."""
        return [k for k in self.layers if k != "last"]

    @property
    def id(self) -> str:
        """Short content id: what an answer's ``calibration`` note names (a last-layer head's id
        is what it was before heads could read other layers)."""
        from .schema import json_sha256

        exclude = {"fitted"} | ({"layers"} if self.layers == ["last"] else set())
        return "sha256:" + json_sha256(self.model_dump(mode="json", exclude=exclude))[:12]

    def logits(self, hidden: np.ndarray, log_probs: np.ndarray) -> np.ndarray:
        """W x + b for one row (hidden (H,), log p (C,) in class order) or many (2-D)."""
        return head_features(hidden, log_probs, self.mean, self.scale) @ self.weights.T + self.bias

    def probabilities(self, hidden: np.ndarray, zero_shot: np.ndarray) -> np.ndarray:
        """p̂ = softmax(W [log p, z] + b): the fitted probabilities, in class order, from the hidden
        state and the zero-shot probabilities (class order)."""
        p = np.asarray(zero_shot, dtype=np.float64)
        with np.errstate(divide="ignore"):
            lp = np.log(p)
        z = self.logits(hidden, lp)
        return restricted_softmax(z) if z.ndim == 1 else np.stack([restricted_softmax(row) for row in z])

    def order(self, options: Sequence[str]) -> list[int]:
        """Index in ``options`` (a question's listed order) of each class; refuses other options."""
        if sorted(options) != sorted(self.classes):
            raise ValueError(f"the question's options {list(options)} are not the head's classes {self.classes}")
        return [list(options).index(c) for c in self.classes]

    def refusal(self, *, model: str, export_sha256: str, prompt_sha256: str, labels: str, debias: str,
                wording: str) -> str | None:
        """Why this head cannot answer a question read this way (None: it can)."""
        if self.model != model:
            return f"fitted for model {self.model}, this is {model}"
        if self.export_sha256 != export_sha256:
            return (f"fitted on another export of {model} (files {self.export_sha256[:12]}, this export "
                    f"{export_sha256[:12]}): its hidden states differ; refit on this export")
        if (self.labels, self.debias, self.wording) != (labels, debias, wording):
            return (f"fitted reading the question with labels/debias/wording {self.labels}/{self.debias}/"
                    f"{self.wording}; this call reads {labels}/{debias}/{wording}")
        if self.prompt_sha256 != prompt_sha256:
            return ("fitted on another prompt (the question's text, options, template or wording differ: "
                    f"{self.prompt_sha256[:12]} vs {prompt_sha256[:12]}); refit for this question")
        return None
