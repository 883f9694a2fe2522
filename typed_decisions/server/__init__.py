"""The HTTP server: one room with a door per concern.

    app.py            routes, error → HTTP translation, OpenAPI (``create_app``)
    service.py        the request path of the routes that run the model: auth, limits, queue, audit, drain
    jobs.py           a batch of queued requests (``Job``) answered where the model is: ``answer_jobs``
    decisions_api.py  POST /v1/decisions (OpenAI's Decisions API) translated in: a body → a System One request
    decisions_out.py  ... and out: the SDK's Decision, and errors in OpenAI's shape
    decisions_schema.py  its body as OpenAI's SDK sends it, for /openapi.json only (the route translates by hand)
    set_aside.py      /v1/decisions: questions the compiler refuses become refusals; cached tokens per request
    keys.py           API keys as salted hashes, constant-time lookup, ``typed-decisions keys``
    limits.py         per-key concurrency and requests per minute (token bucket)
    inputs.py         bounds on a body's JSON: depth, Unicode, questions, options, names
    batching.py       the micro-batcher between the event loop and the engine thread
    body.py           bounded reading (bytes and time) and zstd / gzip decoding of request bodies
    observability.py  Prometheus metrics and the JSON-lines audit log
    settings.py       ``ServerSettings`` from flags and ``TYPED_DECISIONS_*``; loopback-only anonymity
    main.py           ``typed-decisions serve``

Needs the ``[server]`` extra (fastapi, uvicorn, zstandard, prometheus-client). The pipeline never
imports this package; it reaches the engine only through ``Decider.run_many``.

The names below are the public API (what the integrations use: Ray Serve runs ``create_app`` as
its ingress); the modules are the home of everything else and may change:

    create_app(decider, settings=, dispatch=, collectors=)   the app; ``dispatch`` answers one ``Job``
    Job                       one queued request (wire request, label mode, explain?, fitted heads, set aside?)
    answer_jobs(decider, jobs)   a batch of Jobs on a Decider, as the server's engine thread answers them
    answer_each(run_many, items)   a batch, or each item alone if the batch fails (failure isolation)
    ServerSettings, check_exposure, serve_parser, settings_from_args   settings and ``serve``'s flags
    ApiKey, load_api_keys, error_response, main
"""

from __future__ import annotations

from .app import create_app, error_response
from .batching import answer_each
from .keys import ApiKey, load_api_keys
from .main import main, serve_parser, settings_from_args
from .jobs import Job, answer_jobs
from .settings import ServerSettings, check_exposure

__all__ = ["ApiKey", "Job", "ServerSettings", "answer_each", "answer_jobs", "check_exposure", "create_app",
           "error_response", "load_api_keys", "main", "serve_parser", "settings_from_args"]
