"""Errors raised by the exporter: one root class and two failures that leave no usable directory."""


class ExportError(Exception):
    """The export could not be done (bad source, unsupported model, unusable output directory)."""


class SelfCheckError(ExportError):
    """ONNX Runtime disagrees with PyTorch beyond the stated tolerances; no manifest was written."""


class QuantizationError(ExportError):
    """INT8 moved the restricted-softmax probabilities beyond the threshold (use force to keep it)."""
