"""DSPy integration of typed_decisions: run DSPy programs with typed outputs on a local or remote
typed-decisions model.

- ``TypedDecisionsLM``: a ``dspy.BaseLM`` implementing DSPy 3.4's decision protocol
  (``supports_decision_requests``): ``dspy.configure(lm=TypedDecisionsLM("exports/tiny"))``.
- ``TypedPredict``: ``Literal`` / ``bool`` / ``Enum`` outputs as choice / noul / score, without the
  experimental types.
"""

from importlib.metadata import PackageNotFoundError, version

from .backends import DecisionBackend, LocalBackend, RemoteBackend
from .lm import TypedDecisionsLM
from .typed_predict import TypedPredict

try:
    __version__ = version("typed-decisions-dspy")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = ""

__all__ = ["DecisionBackend", "LocalBackend", "RemoteBackend", "TypedDecisionsLM", "TypedPredict",
           "__version__"]
