"""``TypedPredict``: typed outputs from plain Python types, without DSPy's experimental types.

Each output field of the signature becomes one question:

    Literal["billing", "tech"]   → choice    → the chosen member (str / int / bool / None)
    bool                         → noul      → P(yes) >= threshold (0.5 unless fitted)
    an enum.Enum subclass        → score     → the member at the fitted level (declaration order
                                               is the order of the levels, lowest first)

``bool`` and ``Literal`` are already decision outputs for a decision LM such as
``TypedDecisionsLM``; the Enum is rewritten to ``dspy.experimental.Score[...]`` (one level per
member, described by the member's value when it is a string, else its name) and mapped back. The
threshold / cut / weight live in the inner ``dspy.Predict``'s ``fields``, so ``ReAnchor`` fits
them unchanged. Any other output type is refused with the field's name.

>>> class Severity(enum.Enum):
...     LOW = "minor inconvenience"
...     HIGH = "service unusable"
>>> class Triage(dspy.Signature):
...     ticket: str = dspy.InputField()
...     severity: Severity = dspy.OutputField(desc="How severe is the problem?")
>>> TypedPredict(Triage)(ticket="The site is down").severity      # doctest: +SKIP
<Severity.HIGH: 'service unusable'>
"""

from __future__ import annotations

import enum
from typing import Any, Literal, get_origin

import dspy
from dspy.signatures.signature import ensure_signature


def _score_type(members: list[enum.Enum]) -> Any:
    from dspy.experimental import Score

    return Score[tuple(m.value if isinstance(m.value, str) else m.name for m in members)]


class TypedPredict(dspy.Module):
    """``dspy.Predict`` whose ``Literal`` / ``bool`` / ``Enum`` outputs are typed decisions.

    Args:
        signature: a signature class or string; every output must be ``Literal[...]``, ``bool``
            or an ``enum.Enum`` with at least two members, with a description
            (``dspy.OutputField(desc=...)``) saying what is asked.
        **config: passed to the inner ``dspy.Predict``.
    """

    def __init__(self, signature: str | type[dspy.Signature], **config: Any):
        super().__init__()
        sig = ensure_signature(signature)
        self.enums: dict[str, type[enum.Enum]] = {}
        for name, field in sig.output_fields.items():
            ann = field.annotation
            if ann is bool or get_origin(ann) is Literal:
                continue
            if isinstance(ann, type) and issubclass(ann, enum.Enum):
                members = list(ann)
                if len(members) < 2:
                    raise TypeError(f"output {name!r}: the Enum {ann.__name__} needs at least two members "
                                    "(its levels, lowest first)")
                self.enums[name] = ann
                sig = sig.with_updated_fields(name, type_=_score_type(members))
                continue
            raise TypeError(f"output {name!r} has type {getattr(ann, '__name__', ann)!r}: TypedPredict "
                            "outputs are Literal[...] (choice), bool (noul) or an ordered enum.Enum "
                            "(score)")
        self.predict = dspy.Predict(sig, **config)

    def _convert(self, pred: dspy.Prediction) -> dspy.Prediction:
        for name, cls in self.enums.items():
            score = pred[name]  # dspy.experimental.Score: .value (mean level), .level (after cuts)
            pred[name] = list(cls)[score.level]
        return pred

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        return self._convert(self.predict(**kwargs))

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        return self._convert(await self.predict.acall(**kwargs))


__all__ = ["TypedPredict"]
