"""The decoder families the graph builder writes, one file each.

A family file exports `MODEL_TYPES` (config.json's `model_type` values it handles) and
`spec(config: dict) -> DecoderSpec` (spec.py): tensor names, sizes and the few switches
(biases, q/k norms, sliding windows, norm offset, activation, RoPE). Adding a family is adding a
file here and its name to FAMILIES; decoder.py writes every family's graph.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

FAMILIES = ("llama", "phi3", "gemma3")  # modules of this package


def registry() -> dict[str, ModuleType]:
    """model_type -> family module."""
    out: dict[str, ModuleType] = {}
    for name in FAMILIES:
        module = import_module(f"{__name__}.{name}")
        out.update({kind: module for kind in module.MODEL_TYPES})
    return out
