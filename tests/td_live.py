"""A real uvicorn server on 127.0.0.1 for tests that need sockets (disconnects, browsers, SDKs)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from typed_decisions.server import ServerSettings, create_app


@contextlib.contextmanager
def live_server(decider: Any, *, wait_ready: bool = True, **settings: Any) -> Iterator[str]:
    """uvicorn on a free port of 127.0.0.1 in a thread; yields the base URL; stops at the end.
    ``wait_ready``: return only once ``/readyz`` says the model answered its self-test."""
    import uvicorn

    app = create_app(decider, settings=ServerSettings(**settings))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started:
                break
            time.sleep(0.01)
        assert server.started, "uvicorn did not start"
        base = f"http://127.0.0.1:{port}"
        for _ in range(1000 if wait_ready else 0):
            if httpx.get(base + "/readyz").status_code == 200:
                break
            time.sleep(0.02)
        yield base
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
