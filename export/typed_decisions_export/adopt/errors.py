"""The adopter's one error: this ONNX cannot be adopted, and the message says what was found."""

from ..errors import ExportError


class AdoptError(ExportError):
    """The source is not an ONNX decoder the runtime can drive (named in the message); nothing usable was written."""
