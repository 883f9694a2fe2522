"""One real local Ray cluster for all Ray tests (package scope: started once, ~5-10 s, shut down
after the last Ray test), on this machine's loopback, with a small object store."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from td_optional import require

OBJECT_STORE_BYTES = 300 << 20


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[None]:
    ray = require("ray", "bash scripts/setup.sh (installs integrations/ray[test])")
    ray.init(num_cpus=2, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        yield
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="package")
def serve_url(ray_cluster) -> str:
    """Serve's HTTP proxy on a free port of 127.0.0.1; apps are mounted at ``route_prefix="/"``."""
    from ray import serve

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return f"http://127.0.0.1:{port}"
