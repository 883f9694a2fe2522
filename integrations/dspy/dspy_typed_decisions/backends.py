"""The decision backends, from the runtime: ``typed_decisions.client`` holds them, written once.

Re-exported here under this package's public names (``DecisionBackend`` is the runtime's
``Backend`` protocol) so ``from <package>.backends import ...`` keeps working.
"""

from typed_decisions.client import API_KEY_ENV, LocalBackend, RemoteBackend, make_backend
from typed_decisions.client import Backend as DecisionBackend

__all__ = ["API_KEY_ENV", "DecisionBackend", "LocalBackend", "RemoteBackend", "make_backend"]
