"""typed_decisions: typed decisions (noul / choice / score) from an unchanged causal LM.

The runtime compiles a closed question about a state into a prompt whose options carry labels,
runs only the prefill of the model on ONNX Runtime, reads the logits of the label tokens and turns
them into probabilities. It never generates text and never imports torch.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("typed-decisions-runtime")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
