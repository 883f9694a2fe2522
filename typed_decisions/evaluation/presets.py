"""Moved: presets are a served feature and live in ``typed_decisions.presets`` (issue #30).

This name stays only so that code written against the earlier documented import
(``from typed_decisions.evaluation.presets import load_preset, answer_preset``) keeps working; it
holds nothing of its own. New code imports ``typed_decisions.presets``.
"""

from __future__ import annotations

from ..presets import *  # noqa: F401,F403 - the same objects, re-exported
from ..presets import __all__  # noqa: F401
