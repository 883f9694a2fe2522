"""typed_decisions_export: turn a causal LM into the typed_decisions ONNX directory (docs/FORMAT.md).

This distribution is the only part of typed_decisions that imports torch and transformers. It
loads a model (Hugging Face folder, GGUF file or catalogue name), exports the backbone (no LM head)
with the dynamo ONNX exporter, writes the LM head, tokenizer and manifest, and checks the result
against PyTorch before declaring the directory usable. The torch-free runtime reads what it writes.
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import ExportError, QuantizationError, SelfCheckError
from .export import export_model
from .int8.options import Int8Options
from .int8.pipeline import quantize_export

try:
    __version__ = version("typed-decisions-export")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "ExportError",
    "Int8Options",
    "QuantizationError",
    "SelfCheckError",
    "__version__",
    "export_model",
    "quantize_export",
]
