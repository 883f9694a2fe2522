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
    # Ray starts its workers (tasks, actors: Ray Data's labellers, Serve's replicas) at nice 15, so
    # that they yield to its own services. Here they share the cores with the other test worker,
    # which runs at nice 0: whenever that one was busy, they got ~1/30 of a core, and a 20 s test
    # took 12 min. At nice 0 they take their share like every other test's process.
    ray.init(num_cpus=2, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False, _system_config={"worker_niceness": 0})
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
