"""The state one app holds, and the request path both decision routes share.

``app.py`` owns routes and the error → HTTP translation; this module owns what happens to a
decision request between them, written once for ``POST /v1/systemone`` and ``POST
/v1/presets/{name}``::

    auth (401) → accepting? (503) → in-flight +1 → the route's own reading of the body
    → queue (``batching``: 429) → ``Decider.run_many`` on the engine thread → answer
    → in-flight −1, metrics, one audit line

Shutdown refuses new requests (503) and waits for the in-flight ones (``settings.shutdown_timeout_s``),
whichever route they came by.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ..compiler import LabelMode
from ..decider import parse_request
from ..errors import (AuthenticationError, InvalidRequestError, ModelNotFoundError, TypedDecisionsError,
                      UnavailableError, http_status)
from ..evaluation.presets import prepare_preset
from ..schema import DecisionRequest, DecisionResponse, json_sha256
from .batching import MicroBatcher
from .body import decode_body, read_body
from .observability import AuditLog, Metrics
from .settings import ENV_PREFIX, ServerSettings

log = logging.getLogger("typed_decisions.server")

CLIENT_CLOSED = 499  # nginx's "client closed request": logged and counted, never seen by a client

SELF_TEST = {"state": "The server is starting.",
             "questions": {"ready": {"type": "noul", "instructions": "Is the server starting?"}}}


@dataclass(frozen=True)
class Job:
    """One queued request: the parsed wire request, the label mode to compile it with (None: the
    decider's own; presets may ask for another), and whether to explain it (``/v1/explain``)."""

    request: DecisionRequest
    label_mode: LabelMode | None = None
    explain: bool = False


class ClientGone(Exception):
    """The client closed its connection before its answer was ready (nothing is sent back)."""


async def wait_disconnect(request: Request) -> None:
    """Returns when the client has gone away. Call only after the body was read: from then on the
    ASGI server's next message is ``http.disconnect`` (uvicorn sends it when the socket closes)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


@dataclass
class Handled:
    """What one decision request came to, for metrics and the audit line (filled as it goes)."""

    parsed: DecisionRequest | None = None
    response: DecisionResponse | None = None
    preset: dict[str, Any] | None = None


class Service:
    """The state one app holds: the decider (once loaded), the batcher, metrics, lifecycle flags."""

    def __init__(self, decider_or_factory: Any, settings: ServerSettings):
        self.settings = settings
        is_decider = hasattr(decider_or_factory, "run_many")
        self.decider: Any = decider_or_factory if is_decider else None
        self.factory: Callable[[], Any] | None = None if is_decider else decider_or_factory
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="typed-decisions-engine")
        self.batcher: MicroBatcher[Job, Any] | None = None
        self.metrics = Metrics(
            queue_depth=lambda: self.batcher.depth if self.batcher else 0,
            in_flight=lambda: self.in_flight,
            engine_stats=lambda: getattr(getattr(self.decider, "engine", None), "stats", None))
        self.audit = AuditLog(settings.audit_log) if settings.audit_log else None
        self.ready = False
        self.load_error: str | None = None
        self.shutting_down = False
        self.in_flight = 0
        self._idle = asyncio.Event()

    # -- lifecycle

    async def start(self) -> None:
        if not self.settings.api_keys:
            log.warning("no API keys configured: any bearer key is accepted (set %sAPI_KEYS or "
                        "--api-keys-file to require one)", ENV_PREFIX)
        if self.decider is None:  # a factory: load in the background so /healthz answers meanwhile
            self._load_task = asyncio.get_running_loop().create_task(self._load())
        else:
            await self._load()

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.decider is None:
                self.decider = await loop.run_in_executor(self.executor, self.factory)
            s = self.settings
            self.batcher = MicroBatcher(self.run_jobs, self.executor, max_batch=s.max_batch,
                                        max_wait_s=s.max_wait_ms / 1000, queue_size=s.queue_size,
                                        on_batch=self._on_batch, on_drop=self.metrics.dropped.inc)
            self.batcher.start()
            await self.batcher.submit(Job(parse_request({"model": self.decider.name, **SELF_TEST})))
        except Exception as e:  # noqa: BLE001 - reported by /readyz and the log
            self.load_error = f"{type(e).__name__}: {e}"
            log.exception("the model did not load or failed its self-test")
            return
        self.ready = True
        log.info("ready: model %s (aliases: %s)", self.decider.name, ", ".join(self.names[1:]) or "-")

    def begin_shutdown(self) -> None:
        """From now on new decision requests get 503; in-flight ones finish."""
        if not self.shutting_down:
            log.info("shutting down: refusing new requests, finishing %d in flight", self.in_flight)
        self.shutting_down = True

    async def stop(self) -> None:
        self.begin_shutdown()
        if self.in_flight:
            self._idle.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), self.settings.shutdown_timeout_s)
        if self.batcher is not None:
            await self.batcher.stop()
        task = getattr(self, "_load_task", None)
        if task is not None and not task.done():
            task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.audit is not None:
            self.audit.close()

    def _on_batch(self, size: int, seconds: float) -> None:
        self.metrics.batch_size.observe(size)
        self.metrics.batch_seconds.observe(seconds)

    def run_jobs(self, jobs: Sequence[Job]) -> list[Any]:
        """One batch on the engine thread: ONE ``run_many`` per label mode present (one call in
        all when every job uses the decider's own mode, as every ``/v1/systemone`` request does);
        explain jobs one by one (``Decider.explain``: an ``Explanation``)."""
        out: list[Any] = [None] * len(jobs)
        for i, job in enumerate(jobs):
            if job.explain:
                kwargs = {} if job.label_mode is None else {"label_mode": job.label_mode}
                out[i] = self.decider.explain(job.request, **kwargs)
        for mode in dict.fromkeys(j.label_mode for j in jobs if not j.explain):
            idx = [i for i, j in enumerate(jobs) if j.label_mode == mode and not j.explain]
            kwargs = {} if mode is None else {"label_mode": mode}
            for i, response in zip(idx, self.decider.run_many([jobs[i].request for i in idx], **kwargs)):
                out[i] = response
        return out  # type: ignore[return-value]

    # -- checks before any work

    @property
    def names(self) -> list[str]:
        if self.decider is None:
            return list(self.settings.aliases)
        return list(dict.fromkeys([self.decider.name, *self.settings.aliases]))

    def authenticate(self, request: Request) -> str:
        """The caller's id for logs: ``X-Caller``, else the key id, else ``anonymous``."""
        keys = self.settings.api_keys
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        key = key.strip()
        if keys:
            if scheme.lower() != "bearer" or not key:
                raise AuthenticationError("missing API key: send 'Authorization: Bearer <key>'")
            if key not in keys:
                raise AuthenticationError("unknown API key; ask the server's operator for a valid "
                                          "one (the server's keys come from TYPED_DECISIONS_API_KEYS "
                                          "or --api-keys-file)")
        caller = request.headers.get("x-caller", "").strip()[:128]
        return caller or (keys[key] if keys else "anonymous")

    def check_accepting(self) -> None:
        if self.shutting_down:
            raise UnavailableError("the server is shutting down; retry (another replica)",
                                   retry_after_s=1.0)
        if not self.ready or self.batcher is None:
            why = f"the model failed to load: {self.load_error}" if self.load_error else "the model is loading"
            raise UnavailableError(f"not ready: {why}", retry_after_s=5.0)

    # -- the request path, shared by both decision routes

    async def _handle(self, request: Request, work: Callable[[Handled], Awaitable[Any]], *,
                      timed: bool) -> Any:
        """auth → accepting → ``work`` counted in flight → metrics and one audit line, whatever
        the outcome. ``timed``: observe the latency histogram (``/v1/systemone`` only)."""
        t0 = time.perf_counter()
        caller = self.authenticate(request)
        self.check_accepting()
        self.in_flight += 1
        handled = Handled()
        status = 500
        try:
            result = await work(handled)
            status = 200
            assert handled.response is not None
            for answer in handled.response.answers.values():
                self.metrics.questions.labels(answer.type).inc()
            return result
        except TypedDecisionsError as e:
            status = http_status(e)
            raise
        except ClientGone:
            status = CLIENT_CLOSED  # nobody reads this response; the audit line and metrics do
            return JSONResponse({"detail": [{"loc": [], "msg": "client closed the connection",
                                             "type": "client_closed"}]}, status_code=status)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
            seconds = time.perf_counter() - t0
            if status == 200 and timed:
                self.metrics.latency.observe(seconds)
            if self.audit is not None:
                self._audit(request, caller, handled, status, seconds)

    async def _submit(self, job: Job, request: Request) -> Any:
        """Queue ``job`` and wait for its answer, unless the client goes away first: then its
        queue entry is cancelled (the batcher drops it without an engine call; if its batch is
        already running, the answer is discarded) and ``ClientGone`` is raised."""
        assert self.batcher is not None
        answer = asyncio.ensure_future(self.batcher.submit(job))
        gone = asyncio.ensure_future(wait_disconnect(request))
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not answer.done():
            answer.cancel()
            self.metrics.disconnected.inc()
            raise ClientGone
        return answer.result()

    async def decide(self, request: Request) -> JSONResponse:
        """``POST /v1/systemone``: the body is a ``DecisionRequest`` (read, decoded and parsed here)."""

        async def work(handled: Handled) -> JSONResponse:
            if request.headers.get("content-type", "").lower().startswith("multipart/"):
                raise InvalidRequestError(
                    "image attachments need a multimodal model; this server runs a text-only model. "
                    "Send the state as text, an object or an array (no assets).", ("assets",))
            handled.parsed = parsed = parse_request(await self._read_json(request))
            if parsed.model not in self.names:
                raise ModelNotFoundError(f"model {parsed.model!r} is not served here; available: "
                                         f"{', '.join(self.names)} (GET /v1/models)")
            handled.response = await self._submit(Job(parsed), request)
            return JSONResponse(handled.response.model_dump(mode="json"))

        return await self._handle(request, work, timed=True)

    async def preset(self, request: Request, name: str, state: Any, params: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/presets/{name}``: the preset's question, queued like any decision request."""

        async def work(handled: Handled) -> dict[str, Any]:
            call = prepare_preset(self.decider.name, name, state, params)
            handled.preset = {"name": call.preset.name, "version": call.preset.version}
            handled.parsed = parse_request(call.request)
            handled.response = await self._submit(Job(handled.parsed, call.label_mode), request)
            return call.result(handled.response)

        return await self._handle(request, work, timed=False)

    async def explain(self, request: Request) -> JSONResponse:
        """``POST /v1/explain``: a ``DecisionRequest`` answered and explained (``explain.Explanation``),
        through the same queue, limits and audit as ``/v1/systemone``."""

        async def work(handled: Handled) -> JSONResponse:
            handled.parsed = parsed = parse_request(await self._read_json(request))
            if parsed.model not in self.names:
                raise ModelNotFoundError(f"model {parsed.model!r} is not served here; available: "
                                         f"{', '.join(self.names)} (GET /v1/models)")
            explanation = await self._submit(Job(parsed, explain=True), request)
            handled.response = DecisionResponse(model=explanation.model, answers=explanation.answers,
                                                usage=explanation.usage)
            return JSONResponse(explanation.model_dump(mode="json"))

        return await self._handle(request, work, timed=False)

    async def _read_json(self, request: Request) -> Any:
        """The body, bounded and decoded (``body``: 413/415/400), as JSON (422 if it is not)."""
        limit = self.settings.max_body_bytes
        raw = await read_body(request.stream(), limit, request.headers.get("content-length"))
        body = decode_body(raw, request.headers.get("content-encoding"), limit)
        try:
            return json.loads(body)
        except ValueError as e:  # includes UnicodeDecodeError
            err = InvalidRequestError(f"the body is not valid JSON: {e}")
            err.kind = "json_invalid"  # type: ignore[attr-defined]
            raise err from None

    def _audit(self, request: Request, caller: str, handled: Handled, status: int, seconds: float) -> None:
        assert self.audit is not None
        parsed, response = handled.parsed, handled.response
        record = {
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
            "request_id": request.state.request_id, "caller": caller, "status": status,
            "model": parsed.model if parsed else None,
            "questions": {n: q.type for n, q in parsed.questions.items()} if parsed else None,
            "answers": response.model_dump(mode="json")["answers"] if response else None,
            "input_tokens": response.usage.input_tokens if response else None,
            "latency_ms": round(seconds * 1000, 2),
            "state_sha256": json_sha256(parsed.state) if parsed else None,
        }
        if handled.preset is not None:
            record["preset"] = handled.preset
        self.audit.write(record)

    def release_date(self) -> str:
        if self.settings.release_date is not None:
            return self.settings.release_date.isoformat()
        root = getattr(getattr(self.decider, "artifacts", None), "root", None)
        manifest = Path(root) / "manifest.json" if root is not None else None
        if manifest is not None and manifest.is_file():
            return dt.date.fromtimestamp(manifest.stat().st_mtime).isoformat()
        return dt.date.today().isoformat()


__all__ = ["ClientGone", "Job", "SELF_TEST", "Service", "wait_disconnect"]
