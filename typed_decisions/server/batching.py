"""Micro-batching for the HTTP server: requests that arrive together share ONE engine call.

``app.py`` and ``service.py`` own HTTP (auth, bodies, errors, metrics); this module owns only the
queue between the event loop and the single engine thread::

    handler ─ submit() ─▶ bounded queue ─ worker (event loop) ─ up to max_batch requests, or what
    arrived within max_wait_s of the first ─▶ run_many(batch) on the engine thread ─▶ futures

The engine runs on one worker thread (ONNX Runtime releases the GIL, so the event loop stays free
to accept and validate requests meanwhile). Batching decides which requests share an engine call;
the answers do not depend on it (``Decider.run_many`` computes each request as it would alone),
and the tests check it: micro-batched answers are compared with one-by-one ones. A request
that fails inside a batch (a tokenizer-boundary label, a prompt over the token limit) must not fail
its batch-mates, so a failed batch is re-run one request at a time and each request gets its own
answer or its own error. Compilation fails before any engine work, so the retry costs little.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

from ..errors import RateLimitedError

In = TypeVar("In")
Out = TypeVar("Out")


def answer_each(run_many: Callable[[list[In]], Sequence[Out]], items: list[In]) -> list[Out | BaseException]:
    """``run_many(items)``; if it raises, each item alone, so one bad item fails only itself.

    >>> answer_each(lambda xs: [1 / x for x in xs], [1, 0, 4])
    [1.0, ZeroDivisionError('division by zero'), 0.25]
    """
    try:
        out = list(run_many(items))
        assert len(out) == len(items), "run_many must answer every request"
        return out  # type: ignore[return-value]
    except Exception as batch_error:  # noqa: BLE001 - re-run alone to find whose error it is
        if len(items) == 1:
            return [batch_error]
    results: list[Out | BaseException] = []
    for item in items:
        try:
            results.append(run_many([item])[0])
        except Exception as e:  # noqa: BLE001 - handed to that request's caller
            results.append(e)
    return results


class MicroBatcher(Generic[In, Out]):
    """A bounded queue drained in batches by one worker task into ``run_many`` on ``executor``.

    Args:
        run_many: answers a list of requests, in order (``Decider.run_many``). Called on a thread.
        executor: where ``run_many`` runs (one thread: the engine is serial anyway).
        max_batch: most requests per engine call.
        max_wait_s: how long the first request of a batch waits for company.
        queue_size: most requests waiting; beyond it ``submit`` raises
            ``RateLimitedError(limit="queue_size")`` (429).
        on_batch: called with (batch size, seconds) after each engine call (metrics).
        on_drop: called for each queued request dropped unrun because its caller cancelled it
            (the client went away): such a request costs no engine work.
    """

    def __init__(self, run_many: Callable[[list[In]], Sequence[Out]], executor: Executor, *,
                 max_batch: int = 8, max_wait_s: float = 0.005, queue_size: int = 64,
                 on_batch: Callable[[int, float], Any] | None = None,
                 on_drop: Callable[[], Any] | None = None):
        self.run_many = run_many
        self.executor = executor
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.on_batch = on_batch
        self.on_drop = on_drop
        self._queue: collections.deque[tuple[In, asyncio.Future[Out]]] = collections.deque()
        self._arrived = asyncio.Event()
        self._batch_s = 0.05                  # running mean of one engine call, for retry-after
        self._task: asyncio.Task[None] | None = None

    @property
    def depth(self) -> int:
        """Requests waiting for the engine (not counting the batch being computed)."""
        return len(self._queue)

    def retry_after_s(self) -> float:
        """A guess at when the queue has room again: the batches ahead × one call's duration."""
        return max(0.05, self._batch_s * math.ceil((self.depth + 1) / self.max_batch))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._work(), name="micro-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for _, fut in self._queue:
            if not fut.done():
                fut.cancel()
        self._queue.clear()

    async def submit(self, item: In) -> Out:
        """Queue one request and wait for its answer (raises its error)."""
        if len(self._queue) >= self.queue_size:
            raise RateLimitedError(
                f"the request queue is full (queue_size = {self.queue_size} waiting); retry after "
                "the retry-after header, or run more replicas / raise --queue-size",
                limit="queue_size", retry_after_s=self.retry_after_s())
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        self._arrived.set()
        return await fut

    async def _gather(self) -> list[tuple[In, asyncio.Future[Out]]]:
        """The next batch: wait for a first request, then up to max_wait_s for more."""
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while len(self._queue) < self.max_batch:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        batch = []
        while self._queue and len(batch) < self.max_batch:
            item, fut = self._queue.popleft()
            if fut.cancelled():               # the client went away while waiting: no engine work
                if self.on_drop is not None:
                    self.on_drop()
            else:
                batch.append((item, fut))
        return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather()
            if not batch:
                continue
            t0 = time.perf_counter()
            try:
                results = await loop.run_in_executor(
                    self.executor, answer_each, self.run_many, [item for item, _ in batch])
            except asyncio.CancelledError:  # stop(): the batch's callers are told so
                for _, fut in batch:
                    fut.cancel()
                raise
            except Exception as e:  # noqa: BLE001 - the executor itself failed (shut down)
                results = [e] * len(batch)
            seconds = time.perf_counter() - t0
            self._batch_s = 0.8 * self._batch_s + 0.2 * seconds
            if self.on_batch is not None:
                self.on_batch(len(batch), seconds)
            for (_, fut), result in zip(batch, results):
                if fut.done():
                    continue
                if isinstance(result, BaseException):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)


class Unbatched(Generic[In, Out]):
    """The batcher's place for a decider that batches downstream: each request goes at once to
    ``run_one`` (a coroutine, awaited on the event loop), all of them concurrently.

    Why: behind Ray Serve with ``batching="serve"`` the Decider replicas batch with Ray's
    ``@serve.batch`` (``integrations/ray``); a second batcher in front would hold each request
    ``max_wait_s`` and run one batch at a time, so the replicas would never see company. Same
    interface as ``MicroBatcher`` (``submit``, ``depth``, ``retry_after_s``, ``start``, ``stop``);
    ``queue_size`` bounds the requests waiting for their answer (429 beyond it).
    """

    def __init__(self, run_one: Callable[[In], Awaitable[Out]], *, queue_size: int = 64,
                 on_drop: Callable[[], Any] | None = None):
        self.run_one = run_one
        self.queue_size = queue_size
        self.on_drop = on_drop
        self._waiting = 0

    @property
    def depth(self) -> int:
        """Requests waiting for their answer."""
        return self._waiting

    def retry_after_s(self) -> float:
        return 0.05

    def start(self) -> None:
        """Nothing to start: there is no worker task."""

    async def stop(self) -> None:
        """Nothing to stop: each request's own task ends with it."""

    async def submit(self, item: In) -> Out:
        """Run one request now and wait for its answer (raises its error)."""
        if self._waiting >= self.queue_size:
            raise RateLimitedError(
                f"too many requests waiting (queue_size = {self.queue_size}); retry after the "
                "retry-after header, or run more replicas / raise --queue-size",
                limit="queue_size", retry_after_s=self.retry_after_s())
        self._waiting += 1
        try:
            return await self.run_one(item)
        except asyncio.CancelledError:  # the client went away: its request is not answered
            if self.on_drop is not None:
                self.on_drop()
            raise
        finally:
            self._waiting -= 1


__all__ = ["MicroBatcher", "Unbatched", "answer_each"]
