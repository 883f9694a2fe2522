"""Which road writes the backbone: the graph builder (builder/) or the traced torch.onnx export.

`--builder auto` (the default): the builder where it can (a Hugging Face folder with safetensors of
a model_type some family file knows, or a GGUF file of an architecture builder/gguf_config.py
reads; every family's graph equals the traced one within 1e-5 in tests/export/test_builder.py and
test_builder_gguf.py), else the traced path, with a log line saying why. `on`: the builder
or an error naming why not and the fallback. `off`: the traced torch.onnx export, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ExportError

CHOICES = ("auto", "on", "off")


def choose_builder(builder: str, kind: str, path: Path, *, log=print) -> tuple[Any, Any] | None:
    """(DecoderSpec, builder Source) for this source, or None for the traced path."""
    if builder not in CHOICES:
        raise ExportError(f"builder={builder!r}: choose one of {', '.join(CHOICES)}")
    if builder == "off":
        return None
    from .builder import BuilderError, WeightError, plan, plan_source
    from .builder.errors import FALLBACK

    try:
        if kind not in ("hf_folder", "gguf"):
            raise BuilderError(f"{path.name}: the graph builder reads Hugging Face folders with safetensors and GGUF "
                               f"files; a {kind} source is not streamed; {FALLBACK}")
        if kind == "hf_folder":
            plan(path)  # the architecture first: the likelier refusal, and the one a user can act on
            if not any(path.glob("*.safetensors")):
                raise BuilderError(f"{path}: no *.safetensors files (the graph builder streams safetensors only); "
                                   f"{FALLBACK}")
        return plan_source(kind, path)
    except WeightError:  # a truncated or corrupt file: the traced path cannot read it either
        raise
    except BuilderError as e:
        if builder == "on":
            raise
        log(f"builder: not used ({e}); exporting with the traced path")
        return None
