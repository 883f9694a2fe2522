"""How one request is read: its settings, resolved once and carried down as one frozen value.

A request is read under a label mode, a debias mode, a wording and (optionally) a calibration file.
Each has up to three sources, and the first one set wins:

    debias      the request's own ``debias`` field  >  the call's ``debias=``  >  the Decider's default
    label mode  the call's ``label_mode=``  >  the Decider's default      (the wire has no label mode)
    wording     the Decider's (one compiler per Decider)
    calibration the Decider's file (a preset's own calibration is per question: ``answers.py``)

``Settings.resolve`` is the only place this precedence is written; the compiler, the content-free
reading, the heads' checks and the answer step take the resolved value.

>>> d = Settings(label_mode="auto", debias="rotate")
>>> d.resolve(None, label_mode="letters")
Settings(label_mode='letters', debias='rotate', wording='default', calibration=None)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .calibration import CalibrationFile
    from .compiler import LabelMode
    from .schema import Debias, DecisionRequest

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """One request's reading, resolved (``resolve``): label mode (``"auto"`` resolves per question
    type in the compiler), debias, wording name, and the Decider's calibration file (or None)."""

    label_mode: LabelMode = "auto"
    debias: Debias = "none"
    wording: str = "default"
    calibration: CalibrationFile | None = None

    def resolve(self, request: DecisionRequest | None = None, *, label_mode: LabelMode | None = None,
                debias: Debias | None = None) -> Settings:
        """These settings (the defaults) overridden by a call's arguments, then by the request's
        own ``debias`` field (module docstring); ``None`` leaves a default as it is."""
        own = request.debias if request is not None else None
        return replace(self, label_mode=label_mode or self.label_mode, debias=own or debias or self.debias)
