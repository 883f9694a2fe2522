"""The local Ray cluster the Ray studies (ray_label, ray_serve_batching) run on.

Ray starts its workers (tasks, actors: Ray Data's labellers, Serve's replicas) at nice 15, so that
they yield to its own services. Beside a nice-0 process (a study's ``run_many`` baseline or load
generator) they then get ~1/30 of a core whenever it is busy, and a study would measure Ray's
scheduling priority, not Ray. They run at ``WORKER_NICENESS`` instead, as the test cluster's do
(tests/integrations/ray/conftest.py); each study records it in its result.
"""

from __future__ import annotations

WORKER_NICENESS = 0


def start(num_cpus: int) -> None:
    """``ray.init`` of a loopback cluster of ``num_cpus`` CPUs, a 300 MiB object store, no dashboard."""
    import ray

    ray.init(num_cpus=num_cpus, object_store_memory=300 << 20, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False,
             _system_config={"worker_niceness": WORKER_NICENESS})
