"""The model side of the Ray Serve app: one ``Decider`` per replica (``DeciderReplica``) and what
it answers (``Reply``: the results and its engine counters after computing them).

Two ways in, one per ``batching`` choice (serve.py), both answering the server's ``Job``s with the
server's own ``answer_jobs`` beside the model: ``run_jobs`` (a micro-batch's group, routed here by
its state) and ``decide`` (one job; Ray's ``@serve.batch`` gathers the jobs waiting here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray import serve

from typed_decisions.answers import QuestionHead
from typed_decisions.compiler import LabelMode
from typed_decisions.engine import EngineStats
from typed_decisions.presets import DeciderSettings
from typed_decisions.schema import DecisionRequest
from typed_decisions.server import Job, answer_each, answer_jobs

Heads = Mapping[str, QuestionHead] | None  # one request's heads by question name (a preset's head or calibration)



@dataclass(frozen=True)
class Reply:
    """What a Decider replica answers: the results, and its counters after computing them
    (engine counters; ``batches`` / ``batched``: its ``run_many`` calls and the requests in them,
    so that requests per engine call can be read from ``/metrics`` whichever side batches)."""

    results: list[Any]
    replica: str
    stats: EngineStats
    batches: int = 0
    batched: int = 0


class _Counted:
    """The replica's ``Decider`` as ``answer_jobs`` uses it (compiler, settings, prefix cache,
    ``explain``: the Decider's own), but each ``run_many`` counted for ``/metrics``."""

    def __init__(self, replica: DeciderReplica):
        self._replica = replica

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replica.decider, name)

    def run_many(self, requests: list[DecisionRequest], *, label_mode: LabelMode | None = None,
                 heads: Sequence[Heads] | None = None) -> list[Any]:
        return self._replica._run_many(requests, label_mode, heads)


class DeciderReplica:
    """One ``Decider`` per replica; its calls run on a worker thread.

    Two ways in, one per ``batching`` choice, both answering the server's ``Job``s with its
    ``answer_jobs``: ``run_jobs`` takes a batch the ingress's micro-batcher made (one state's group
    of it); ``decide`` takes one job, and Ray's ``@serve.batch`` gathers the jobs that reach this
    replica together (up to ``max_batch``, or what arrived within ``max_wait_s`` of the first, the
    micro-batcher's own settings) into ONE ``Decider.run_many``, whatever their states.
    ``run_many`` / ``explain`` serve ``RemoteDecider``'s own (a Decider's methods).
    """

    def __init__(self, model: str, threads: int, decider_kwargs: dict[str, Any],
                 max_batch: int = 8, max_wait_s: float = 0.005):
        from typed_decisions import Decider

        self.decider = Decider.load(model, threads=threads, **decider_kwargs)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.batches = self.batched = 0
        self._count = threading.Lock()
        self._counted = _Counted(self)
        self.decide_batch.set_max_batch_size(max_batch)  # per replica process (Ray's documented way)
        self.decide_batch.set_batch_wait_timeout_s(max_wait_s)

    def _reply(self, results: list[Any]) -> Reply:
        return Reply(results, self.replica, dataclasses.replace(self.decider.engine.stats),
                     self.batches, self.batched)

    def _run_many(self, requests: list[DecisionRequest], label_mode: LabelMode | None,
                  heads: Sequence[Heads] | None = None) -> list[Any]:
        """``Decider.run_many`` on this thread, counted (one call, ``len(requests)`` requests);
        ``heads``: per request, a fitted preset's heads (checked by the Decider: a head fitted for
        another export or prompt is refused with a 422 at ``heads.<question>``)."""
        kwargs: dict[str, Any] = {} if label_mode is None else {"label_mode": label_mode}
        if heads is not None and any(heads):
            kwargs["heads"] = list(heads)
        out = self.decider.run_many(requests, **kwargs)
        with self._count:
            self.batches += 1
            self.batched += len(requests)
        return out

    def info(self) -> dict[str, Any]:
        """What the ingress needs to know of the replicas' Decider: its name, export, and the
        settings a preset answer depends on (label mode, debias, wording, calibration, quantization)."""
        return {"name": self.decider.name, "root": str(self.decider.artifacts.root),
                "settings": DeciderSettings.of(self.decider)}

    async def run_many(self, requests: list[DecisionRequest], label_mode: LabelMode | None,
                       heads: Sequence[Heads] | None = None) -> Reply:
        return self._reply(await asyncio.to_thread(self._run_many, requests, label_mode, heads))

    async def run_jobs(self, jobs: list[Job]) -> Reply:
        """A micro-batch's group, answered as the server's engine thread answers its batch."""
        return self._reply(await asyncio.to_thread(answer_jobs, self._counted, jobs))

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)  # set from the settings in __init__
    async def decide_batch(self, jobs: list[Job]) -> list[Reply]:
        """ONE ``answer_jobs`` for the batch (one ``run_many`` per label mode present: one in all,
        usually); a job that fails fails alone (``answer_each``): its slot holds its exception,
        its batch-mates their answers."""
        results = await asyncio.to_thread(answer_each, lambda js: answer_jobs(self._counted, js), jobs)
        return [self._reply([r]) for r in results]

    async def decide(self, job: Job) -> Reply:
        """One job, answered in a ``@serve.batch`` batch with the others waiting here."""
        return await self.decide_batch(job)

    async def explain(self, request: DecisionRequest, label_mode: LabelMode | None) -> Reply:
        kwargs = {} if label_mode is None else {"label_mode": label_mode}
        return self._reply([await asyncio.to_thread(self.decider.explain, request, **kwargs)])


__all__ = ["DeciderReplica", "Heads", "Reply"]
