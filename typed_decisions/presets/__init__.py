"""Versioned question presets: a worded question plus a policy for acting on its answer.

A served product feature (``POST /v1/presets/{name}``, ``answer_preset``), so it lives beside the
pipeline, not in ``evaluation/``: the server imports this package and never the evaluation
tooling. One module per idea:

    preset.py     what a preset is (``Preset``: question, policy, examples, calibrations, fitted
                  heads) and the checks that keep those consistent; ``content_hash``, ``examples_hash``
    store.py      the shipped presets (``data/*.json``) and their version registry
                  (``data/_registry.json``): ``load_preset``, ``list_presets``, ``register_preset``,
                  ``with_calibration``, ``with_head``
    selection.py  which calibration or fitted head a call uses (``DeciderSettings``,
                  ``select_calibration``, ``select_head``)
    answer.py     asking (``prepare_preset`` → ``PresetCall.result``, ``answer_preset``) and the
                  acting policy (``decide_action``)
    cli.py        ``typed-decisions presets list | show | hash | register | answer`` (imported
                  only by the command, never here)

The question itself is a ``spec.QuestionSpec`` (shared with the evaluation tooling, which fits
presets' calibrations and heads: ``typed-decisions calibrate --to-preset``, ``typed-decisions fit``).
It reaches the engine only through ``Decider``; the pipeline never imports this package.
"""

from __future__ import annotations

from .answer import PARAMS, PresetCall, answer_preset, decide_action, prepare_preset
from .preset import (Policy, Preset, PresetCalibration, PresetError, PresetExample, PresetFit, PresetOption,
                     PresetQuestion, content_hash, examples_hash)
from .selection import DeciderSettings, select_calibration, select_head
from .store import REGISTRY, list_presets, load_preset, preset_file, register_preset, with_calibration, with_head

__all__ = ["PARAMS", "REGISTRY", "DeciderSettings", "Policy", "Preset", "PresetCall", "PresetCalibration",
           "PresetError", "PresetExample", "PresetFit", "PresetOption", "PresetQuestion", "answer_preset",
           "content_hash", "decide_action", "examples_hash", "list_presets", "load_preset", "prepare_preset",
           "preset_file", "register_preset", "select_calibration", "select_head", "with_calibration", "with_head"]
