"""Ray integration for typed-decisions: scale-out on a Ray cluster, depending on the runtime only.

    serve.py    Ray Serve: the project's HTTP app as ingress over N ``Decider`` replicas, routed
                by state with Ray's ConsistentHashRouter (``build_app``, ``app_builder``)

The runtime never imports this package; ``typed-decisions serve --ray`` imports it on demand.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .serve import RayServeOptions, RemoteDecider, app_builder, build_app, routing_key

try:
    __version__ = version("typed-decisions-ray")
except PackageNotFoundError:  # pragma: no cover - a source tree without an install
    __version__ = "0.0.0"

__all__ = ["RayServeOptions", "RemoteDecider", "__version__", "app_builder", "build_app", "routing_key"]
