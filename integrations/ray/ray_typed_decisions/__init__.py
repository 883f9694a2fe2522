"""Ray integration for typed-decisions: scale-out on a Ray cluster, depending on the runtime only.

    serve.py    Ray Serve: the project's HTTP app as ingress over N ``Decider`` replicas, routed
                by state with Ray's ConsistentHashRouter (``build_app``, ``app_builder``)
    replica.py  the model side: ``DeciderReplica`` answers the server's Jobs beside its model
    replica_metrics.py  the replicas' engine counters, summed and per replica in ``/metrics``
    data.py     Ray Data: ``label_dataset`` adds typed answer columns to every row (``Labeller``
                actors, one ``Decider`` each)
    columns.py  the fixed Arrow schema of those columns (``output_schema``, ``LABEL_COLUMNS_DOC``)
    cli.py      ``typed-decisions serve --ray`` and ``typed-decisions label``

The runtime never imports this package; its CLI imports it only when asked (``--ray``, ``label``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import columns
from .columns import output_schema
from .data import Labeller, label_dataset
from .serve import RayServeOptions, RemoteDecider, app_builder, build_app, routing_key

LABEL_COLUMNS_DOC: str = columns.__doc__ or ""

try:
    __version__ = version("typed-decisions-ray")
except PackageNotFoundError:  # pragma: no cover - a source tree without an install
    __version__ = "0.0.0"

__all__ = ["LABEL_COLUMNS_DOC", "Labeller", "RayServeOptions", "RemoteDecider", "__version__",
           "app_builder", "build_app", "label_dataset", "output_schema", "routing_key"]
