"""The builder's errors: each names what is wrong and, where there is one, the way around it."""

from __future__ import annotations

from ..errors import ExportError

FALLBACK = "export it with the traced path instead (--builder off; --builder auto falls back by itself)"


class BuilderError(ExportError):
    """The graph builder cannot write this model (the traced path may still can)."""


class UnsupportedArchitecture(BuilderError):
    """No family file knows this model_type."""

    def __init__(self, model_type: str, known: list[str]):
        super().__init__(
            f"the graph builder has no family for model_type {model_type!r} (it knows {', '.join(sorted(known))}); "
            f"{FALLBACK}"
        )
        self.model_type = model_type


class WeightError(BuilderError):
    """A weight the family names is missing, has the wrong shape, or its file is truncated or corrupt."""
