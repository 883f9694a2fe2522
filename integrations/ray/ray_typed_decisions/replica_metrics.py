"""The replicas' engine counters as the ingress sees them: summed for the server's own metrics
(``ClusterEngine``, standing in for ``decider.engine``) and per replica in ``/metrics``
(``ReplicaMetrics``, a Prometheus collector). Each ``Reply`` carries its replica's counters after
the call; the newest snapshot per replica is kept.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily

from typed_decisions.engine import EngineStats

from .replica import Reply


class ClusterEngine:
    """Stands in for ``decider.engine`` in the server's metrics: the replicas' counters summed."""

    def __init__(self) -> None:
        self.replicas: dict[str, EngineStats] = {}
        self.batches: dict[str, tuple[int, int]] = {}  # replica: (run_many calls, requests in them)
        self._lock = threading.Lock()

    def record(self, reply: Reply) -> None:
        with self._lock:  # counters only grow: keep the newest snapshot of each replica
            old = self.replicas.get(reply.replica)
            if old is None or reply.stats.calls >= old.calls:
                self.replicas[reply.replica] = reply.stats
            if reply.batches >= self.batches.get(reply.replica, (0, 0))[0]:
                self.batches[reply.replica] = (reply.batches, reply.batched)

    @property
    def stats(self) -> EngineStats:
        with self._lock:
            snapshots = list(self.replicas.values())
        return EngineStats(**{f.name: sum(getattr(s, f.name) for s in snapshots)
                              for f in dataclasses.fields(EngineStats)})


class ReplicaMetrics:
    """Prometheus collector: each Decider replica's engine counters, labelled by replica."""

    FIELDS = (("tokens_computed", "Tokens run through the model"),
              ("tokens_logical", "Tokens of every full prompt (no sharing)"),
              ("cache_hits", "Prefix-cache hits (the template head alone counts)"),
              ("cache_misses", "Prefix-cache misses"),
              ("cache_tokens_reused", "Prompt tokens restored from the prefix cache"),
              ("calls", "Engine calls"))

    def __init__(self, engine: ClusterEngine):
        self.engine = engine

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self.engine._lock:
            snapshots = dict(self.engine.replicas)
        for attr, doc in self.FIELDS:
            name = attr.replace("cache_", "prefix_cache_")
            family = CounterMetricFamily(f"typed_decisions_replica_{name}", f"{doc}, per Decider replica",
                                         labels=["replica"])
            for replica, stats in sorted(snapshots.items()):
                family.add_metric([replica], float(getattr(stats, attr)))
            yield family
        with self.engine._lock:
            batches = dict(self.engine.batches)
        for i, (name, doc) in enumerate((("run_many_calls", "Decider.run_many calls"),
                                         ("run_many_requests", "Requests in those calls"))):
            family = CounterMetricFamily(f"typed_decisions_replica_{name}",
                                         f"{doc}, per Decider replica (their ratio: the mean batch)",
                                         labels=["replica"])
            for replica, counts in sorted(batches.items()):
                family.add_metric([replica], float(counts[i]))
            yield family


__all__ = ["ClusterEngine", "ReplicaMetrics"]
