"""LangChain / LangGraph integration of typed_decisions: typed closed questions as Runnables.

- ``DecisionRunnable``: fixed questions → ``DecisionResponse`` (batch = one engine call).
- ``ChoiceRunnable`` / ``NoulRunnable`` / ``ScoreRunnable``: one question → str / bool / float
  (``.with_answer()`` → the full answer).
- ``DecisionRouter``: one choice question dispatches to a Runnable per option; unsure or manual
  options go to a fallback; returns ``RoutedResult``.
- ``choice_edge``: the same rule as a LangGraph conditional edge.
- ``DecisionTool``: ``runnable.as_tool()`` for agents.
- ``LocalDecisionModel`` / ``RemoteDecisionModel``: LangChain's standard ``BaseDecisionModel``
  (``langchain_core.decisions``: ``ClassifierRequest`` → ``ClassifierResponse``), in-process or a server.
- ``LocalBackend`` / ``RemoteBackend``: the engine in-process or a server over HTTP
  (``typed_decisions.client``, re-exported).
"""

from importlib.metadata import PackageNotFoundError, version

from .backends import DecisionBackend, LocalBackend, RemoteBackend
from .decision import DecisionRunnable
from .decision_model import LocalDecisionModel, RemoteDecisionModel
from .graph import ChoiceEdge, choice_edge
from .questions import ChoiceRunnable, NoulRunnable, ScoreRunnable
from .router import DecisionRouter, RoutedResult
from .tools import DecisionTool

try:
    __version__ = version("typed-decisions-langchain")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = ""

__all__ = [
    "ChoiceEdge",
    "ChoiceRunnable",
    "DecisionBackend",
    "DecisionRouter",
    "DecisionRunnable",
    "DecisionTool",
    "LocalBackend",
    "LocalDecisionModel",
    "NoulRunnable",
    "RemoteBackend",
    "RemoteDecisionModel",
    "RoutedResult",
    "ScoreRunnable",
    "__version__",
    "choice_edge",
]
