"""Evaluation tooling: labelled data in, metrics and fitted calibrations out. A door, not the pipeline.

The runtime answers questions (``decider`` and the pipeline modules beside it); this package asks
them of labelled rows and measures the answers. One module per idea:

    datasets.py     named public datasets, fetched from pinned packages, deduplicated and split
    registry.py     the table of them: each one's pinned file, parser and default question
    run.py          ask a spec of every row (``evaluate``), the reliability plot
    metrics.py      accuracy, macro-F1, NLL, Brier, ECE, reliability bins, risk-coverage
    calibration_fitting.py  calibration fitting (temperature, contextual, combined); applying is ``calibration.py``
    permutation.py  how much option order moves the probabilities
    fit_cli.py      ``typed-decisions fit``: a fitted head from a dataset's rows, into a preset
    sources.py      the rows a command names (--dataset, --data + --spec, --preset)
    cli.py          ``typed-decisions eval | calibrate``

The question spec (``QuestionSpec``) is ``typed_decisions/spec.py`` and the presets are
``typed_decisions/presets/`` with their command, ``typed-decisions presets`` (the server serves
them; it never imports this package). This package fits their calibrations and heads;
``presets.py`` here and the name ``main_presets`` below only keep the old import paths.

Nothing in the pipeline imports this package; it reaches the engine only through ``Decider``.
The names below are imported lazily (the submodules are the home of everything else).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "OptionSpec": "..spec", "QuestionSpec": "..spec",
    "evaluate": "run", "collect_probabilities": "run", "content_free_probabilities": "run",
    "plot_reliability": "run",
    "calibration_fit": "calibration_fitting", "fit_temperature": "calibration_fitting",
    "load_dataset": "datasets", "load_preset": "..presets", "answer_preset": "..presets",
    "main_eval": "cli", "main_calibrate": "cli", "main_presets": "..presets.cli",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'typed_decisions.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(module if module.startswith(".") else f".{module}", __name__), name)


if TYPE_CHECKING:  # pragma: no cover
    from .cli import main_calibrate, main_eval
    from .datasets import load_dataset
    from .calibration_fitting import calibration_fit, fit_temperature
    from ..presets import answer_preset, load_preset
    from ..presets.cli import main_presets
    from .run import collect_probabilities, content_free_probabilities, evaluate, plot_reliability
    from ..spec import OptionSpec, QuestionSpec
