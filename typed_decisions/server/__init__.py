"""The HTTP server: one room with a door per concern.

    app.py            routes, error → HTTP translation, OpenAPI (``create_app``)
    service.py        the request path of the decision routes: auth, queue, in-flight count, audit
    batching.py       the micro-batcher between the event loop and the engine thread
    body.py           bounded reading and zstd / gzip decoding of request bodies
    observability.py  Prometheus metrics and the JSON-lines audit log
    settings.py       ``ServerSettings`` from flags and ``TYPED_DECISIONS_*``, API keys
    main.py           ``typed-decisions serve``

Needs the ``[server]`` extra (fastapi, uvicorn, zstandard, prometheus-client). The pipeline never
imports this package; it reaches the engine only through ``Decider.run_many``.
"""

from __future__ import annotations

from .app import create_app, error_response
from .main import main
from .settings import ServerSettings, load_api_keys

__all__ = ["ServerSettings", "create_app", "error_response", "load_api_keys", "main"]
