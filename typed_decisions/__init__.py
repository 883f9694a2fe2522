"""typed_decisions: typed decisions (noul / choice / score) from an unchanged causal LM.

The runtime compiles a closed question about a state into a prompt whose options carry labels,
runs only the prefill of the model on ONNX Runtime, reads the logits of the label tokens and turns
them into probabilities. It never generates text and never imports torch.

>>> from typed_decisions import Decider, Choice, Noul, Score
>>> decider = Decider.from_dir("path/to/export")                     # doctest: +SKIP
>>> decider.decide("I was charged twice.", {
...     "team": Choice(criteria={"billing": "Payments", "technical": None}),
...     "urgent": Noul(instructions="Is it urgent?"),
...     "severity": Score(criteria=["low", "medium", "high"])})         # doctest: +SKIP

Public names are imported lazily, so ``import typed_decisions`` (and the CLI's ``--help``) stays
cheap; ``onnxruntime`` is loaded on first use of the engine.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("typed-decisions-runtime")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

_EXPORTS = {
    "Decider": "decider", "parse_request": "decider",
    "Noul": "schema", "Choice": "schema", "Score": "schema", "NoulCriteria": "schema",
    "DecisionRequest": "schema", "DecisionResponse": "schema", "NoulAnswer": "schema",
    "ChoiceAnswer": "schema", "ScoreAnswer": "schema", "Usage": "schema",
    "CalibrationFile": "calibration", "load_artifacts": "artifacts",
    "TypedDecisionsError": "errors", "InvalidRequestError": "errors",
    "TokenizerBoundaryError": "errors", "ContextTooLongError": "errors", "EngineError": "errors",
    "ArtifactError": "errors", "ModelNotFoundError": "errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'typed_decisions' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


if TYPE_CHECKING:  # pragma: no cover
    from .artifacts import load_artifacts
    from .calibration import CalibrationFile
    from .decider import Decider, parse_request
    from .errors import (ArtifactError, ContextTooLongError, EngineError, InvalidRequestError,
                         ModelNotFoundError, TokenizerBoundaryError, TypedDecisionsError)
    from .schema import (Choice, ChoiceAnswer, DecisionRequest, DecisionResponse, Noul,
                         NoulAnswer, NoulCriteria, Score, ScoreAnswer, Usage)
