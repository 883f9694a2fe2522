"""One answer per request, as a check any test can run on any export: the same probabilities for
request A alone, in a batch with unrelated or prefix-sharing requests, cold or after a warm prefix
cache, and through the HTTP server under 16 concurrent clients (tests/test_engine_invariance.py
on the tiny model; tests/export/test_export_default_slow.py on the default model). The probe itself
(the requests, ``vector``, ``deviations``) lives in benchmarks/invariance.py, which the benchmarks
share; this module adds the tolerance and the live server."""

from __future__ import annotations

import socket
import threading
import time

from benchmarks.invariance import (  # noqa: F401  (the probe, shared with the benchmarks)
    OTHER,
    QUESTIONS,
    A,
    B,
    C,
    begin_alike,
    deviations,
    http_answers,
    request,
    vector,
)
from typed_decisions.decider import Decider

TOL = 1e-5


class LiveServer:
    """The real server app on uvicorn, 127.0.0.1, in a thread (micro-batching on)."""

    def __init__(self, decider: Decider):
        import uvicorn

        from typed_decisions.server import ServerSettings, create_app

        app = create_app(decider, settings=ServerSettings(max_batch=8, max_wait_ms=50))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.server.started, "uvicorn did not start"
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
