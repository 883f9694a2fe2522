"""What the HTTP server tells its operators: Prometheus metrics and the JSON-lines audit log.

Metrics (``GET /metrics``), all prefixed ``typed_decisions_``: ``http_requests_total{route,status}``,
``request_seconds`` (histogram of answered decisions), ``questions_total{type}``,
``batch_requests`` / ``batch_seconds`` (per engine call), ``queue_depth``, ``in_flight``,
``client_disconnects_total`` and ``dropped_before_engine_total`` (callers that left; the latter cost no
engine call), per key (the key id, or ``anonymous``; never the key) ``key_requests_total{key,status}``,
``key_limited_total{key,limit}`` (429s by the limit hit) and ``key_in_flight{key}``, and the
engine's counters ``tokens_computed_total`` vs ``tokens_logical_total`` (their ratio is what prefix
sharing saves) and ``prefix_cache_hits_total`` / ``prefix_cache_misses_total``.

The audit log has one line per model request (``/v1/systemone``, ``/v1/explain`` and
``/v1/presets/{name}``, the latter with a ``preset`` field), answered or refused (by a limit or for its body) after
authentication: ids, the key id, caller, model, question names and types, answers, latency,
and the sha256 of the state's canonical JSON (``schema.json_sha256``), never the state itself nor
a key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily


class _EngineCollector:
    """Engine counters (read from ``decider.engine.stats`` at scrape time)."""

    def __init__(self, stats: Callable[[], Any]):
        self.stats = stats

    def describe(self) -> list[Any]:
        return []  # nothing at registration: the decider may still be loading

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.stats()
        for name, attr, doc in (
                ("typed_decisions_tokens_computed", "tokens_computed", "Tokens run through the model"),
                ("typed_decisions_tokens_logical", "tokens_logical", "Tokens of every full prompt (no sharing)"),
                ("typed_decisions_prefix_cache_hits", "cache_hits", "Prefix-cache hits"),
                ("typed_decisions_prefix_cache_misses", "cache_misses", "Prefix-cache misses")):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], float(getattr(stats, attr, 0) if stats is not None else 0))
            yield family


class Metrics:
    """One app's metrics, in a registry of its own (several apps in one process never mix).

    Args:
        queue_depth, in_flight: read at scrape time.
        engine_stats: returns ``decider.engine.stats`` (or None while loading), read at scrape time.
    """

    def __init__(self, queue_depth: Callable[[], int], in_flight: Callable[[], int],
                 engine_stats: Callable[[], Any]):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("typed_decisions_http_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.latency = Histogram("typed_decisions_request_seconds", "POST /v1/systemone latency",
                                 buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30), registry=r)
        self.questions = Counter("typed_decisions_questions", "Questions answered, by type", ["type"],
                                 registry=r)
        self.batch_size = Histogram("typed_decisions_batch_requests", "Requests per engine call",
                                    buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.batch_seconds = Histogram("typed_decisions_batch_seconds", "Seconds per engine call",
                                       registry=r)
        Gauge("typed_decisions_queue_depth", "Requests waiting for the engine",
              registry=r).set_function(queue_depth)
        Gauge("typed_decisions_in_flight", "Decision requests being handled (/v1/systemone, /v1/presets/...)",
              registry=r).set_function(in_flight)
        self.disconnected = Counter("typed_decisions_client_disconnects",
                                    "Decision requests whose client went away before the answer", registry=r)
        self.dropped = Counter("typed_decisions_dropped_before_engine",
                               "Queued requests dropped without an engine call: their client went away",
                               registry=r)
        self.key_requests = Counter("typed_decisions_key_requests",
                                    "Model requests by key id (never the key) and status", ["key", "status"],
                                    registry=r)
        self.key_limited = Counter("typed_decisions_key_limited",
                                   "Requests refused 429 by key id and the limit hit", ["key", "limit"],
                                   registry=r)
        self.key_in_flight = Gauge("typed_decisions_key_in_flight", "Model requests in flight by key id",
                                   ["key"], registry=r)
        r.register(_EngineCollector(engine_stats))


class AuditLog:
    """JSON lines, one per answered or refused decision request. Never the state text, never a key."""

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        self._file.close()


__all__ = ["AuditLog", "Metrics"]
