"""The state one app holds, and the request path every route that runs the model shares.

``app.py`` owns routes and the error → HTTP translation; this module owns what happens to a
model request between them, written once for every route that runs the model (``POST
/v1/systemone``, ``POST /v1/explain``, ``POST /v1/presets/{name}``)::

    auth (401: hashed keys, ``keys.py``) → accepting? (503) → the key's limits (``limits.py``: 429)
    → in-flight +1 → the body: bounded in bytes and time (``body.py``: 413/415/400/408), in JSON
    (``inputs.py``: 422) → queue (``batching``: 429) → ``jobs.answer_jobs`` on the engine thread
    → answer → in-flight −1, per-key metrics, one audit line

Shutdown refuses new requests (503) and waits for the in-flight ones (``settings.shutdown_timeout_s``),
whichever route they came by. Without keys every caller is ``anonymous`` (one set of limits), and
only on loopback unless ``settings.allow_anonymous``: a request that reached a non-loopback
address of an anonymous server is refused (401), however the app was started.

Why over 400 lines: the path above is one sequence that every model route shares, and each step
is a few lines calling its own room (keys, limits, body, inputs, batching); cutting the sequence
across files would hide the order a request goes through, which is what this module is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ..decider import parse_request
from pydantic import BaseModel, ValidationError

from ..errors import (AuthenticationError, InvalidRequestError, ModelNotFoundError, RateLimitedError,
                      TypedDecisionsError, UnavailableError, http_status)
from ..presets import Preset, load_preset, prepare_preset
from ..models import CATALOGUE
from ..schema import DecisionRequest, DecisionResponse, Usage, json_sha256
from .batching import MicroBatcher, Unbatched
from . import decisions_api, decisions_out
from .body import decode_body, read_body
from .inputs import check_json, check_questions, parse_json, shown
from .jobs import Job, answer_jobs
from .keys import find_key
from .set_aside import Answered, Prepared
from .limits import KeyLimits, Limiter
from .observability import AuditLog, Metrics
from .settings import ANONYMOUS_WARNING, ENV_PREFIX, ServerSettings, is_loopback

log = logging.getLogger("typed_decisions.server")

CLIENT_CLOSED = 499  # nginx's "client closed request": logged and counted, never seen by a client

SELF_TEST = {"state": "The server is starting.",
             "questions": {"ready": {"type": "noul", "instructions": "Is the server starting?"}}}


class ClientGone(Exception):
    """The client closed its connection before its answer was ready (nothing is sent back)."""


async def wait_disconnect(request: Request) -> None:
    """Returns when the client has gone away. Call only after the body was read: from then on the
    ASGI server's next message is ``http.disconnect`` (uvicorn sends it when the socket closes)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class PresetRequest(BaseModel):
    """Body of ``POST /v1/presets/{name}``: the state, and optional ``label_mode`` / ``threshold``."""

    model_config = {"extra": "forbid"}
    state: str | dict[str, Any] | list[Any]
    params: dict[str, Any] = {}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key id (``anonymous`` without keys), the caller named in the audit log
    (``X-Caller``, else the key id), and the key's limits."""

    key_id: str
    caller: str
    limits: KeyLimits


ANONYMOUS = "anonymous"


@dataclass
class Handled:
    """What one decision request came to, for metrics and the audit line (filled as it goes)."""

    parsed: DecisionRequest | None = None
    response: DecisionResponse | None = None
    preset: dict[str, Any] | None = None


class Service:
    """The state one app holds: the decider (once loaded), the batcher, metrics, lifecycle flags."""

    def __init__(self, decider_or_factory: Any, settings: ServerSettings, *,
                 dispatch: Callable[[Job], Awaitable[Any]] | None = None):
        self.settings = settings
        # the operator's preset files, by name (a shipped preset of the same name is shadowed)
        self.presets: dict[str, Preset] = {}
        for f in settings.presets:
            preset = load_preset(f if str(f).endswith(".json") else f"{f}.json")
            self.presets[preset.name] = preset
        self.dispatch = dispatch
        is_decider = hasattr(decider_or_factory, "run_many")
        self.decider: Any = decider_or_factory if is_decider else None
        self.factory: Callable[[], Any] | None = None if is_decider else decider_or_factory
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="typed-decisions-engine")
        self.batcher: MicroBatcher[Job, Any] | Unbatched[Job, Any] | None = None
        self.metrics = Metrics(
            queue_depth=lambda: self.batcher.depth if self.batcher else 0,
            in_flight=lambda: self.in_flight,
            engine_stats=lambda: getattr(getattr(self.decider, "engine", None), "stats", None))
        self.audit = AuditLog(settings.audit_log) if settings.audit_log else None
        self.limiter = Limiter()
        self.ready = False
        self.load_error: str | None = None
        self.shutting_down = False
        self.in_flight = 0
        self._idle = asyncio.Event()

    # -- lifecycle

    async def start(self) -> None:
        if not self.settings.api_keys and self.settings.allow_anonymous:
            log.warning("%s (--allow-anonymous). Issue keys with 'typed-decisions keys add NAME'.",
                        ANONYMOUS_WARNING)
        elif not self.settings.api_keys:
            log.warning("no API keys configured: any bearer key is accepted, on loopback only (set "
                        "%sAPI_KEYS_FILE or --api-keys-file to require one)", ENV_PREFIX)
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
            if self.dispatch is not None:  # the decider batches downstream (Ray Serve's @serve.batch)
                self.batcher = Unbatched(self.dispatch, queue_size=s.queue_size,
                                         on_drop=self.metrics.dropped.inc)
            else:
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
        """One batch on the engine thread (``jobs.answer_jobs``: ONE ``run_many`` per label mode
        present, explain jobs one by one, ``/v1/decisions`` jobs prepared by ``set_aside``). A
        decider that answers Jobs itself, where its model is (Ray Serve's ``RemoteDecider``),
        gets the batch as it is: the set-aside needs the model's compiler and prefix cache."""
        own = getattr(self.decider, "answer_jobs", None)
        return list(own(jobs)) if own is not None else answer_jobs(self.decider, jobs)

    # -- checks before any work

    @property
    def names(self) -> list[str]:
        """What a request's ``model`` may say: the served model's name, the operator's aliases,
        then the catalogue's aliases of that model (``default``, ``tiny``), as the CLI accepts."""
        if self.decider is None:
            return list(self.settings.aliases)
        spec = CATALOGUE.get(self.decider.name)
        return list(dict.fromkeys([self.decider.name, *self.settings.aliases, *(spec.aliases if spec else ())]))

    def _limits(self, record: Any = None) -> KeyLimits:
        s = self.settings
        return KeyLimits(
            max_concurrent=getattr(record, "max_concurrent", None) or s.key_max_concurrent,
            requests_per_minute=getattr(record, "requests_per_minute", None) or s.key_requests_per_minute,
            burst=getattr(record, "burst", None) or s.key_burst)

    def authenticate(self, request: Request) -> Principal:
        """The caller, from ``Authorization: Bearer <key>`` (compared in constant time with the
        hashed keys), or ``anonymous`` when the server has no keys (loopback only, unless
        ``allow_anonymous``)."""
        keys = self.settings.api_keys
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        key = key.strip()
        if keys:
            if scheme.lower() != "bearer" or not key:
                raise AuthenticationError("missing API key: send 'Authorization: Bearer <key>'")
            record = find_key(keys, key)
            if record is None:
                raise AuthenticationError("unknown API key; ask the server's operator for a valid "
                                          "one (typed-decisions keys add NAME issues one)")
            key_id, limits = record.id, self._limits(record)
        else:
            server = request.scope.get("server") or ("", None)
            if not self.settings.allow_anonymous and _is_ip(server[0]) and not is_loopback(server[0]):
                raise AuthenticationError(
                    "this server has no API keys, so it answers anonymous callers on loopback only; "
                    "its operator must configure keys (or --allow-anonymous)")
            key_id, limits = ANONYMOUS, self._limits()
        caller = shown(request.headers.get("x-caller", "").strip(), 128).removesuffix("…")
        return Principal(key_id, caller or key_id, limits)

    def check_accepting(self) -> None:
        if self.shutting_down:
            raise UnavailableError("the server is shutting down; retry (another replica)",
                                   retry_after_s=1.0)
        if not self.ready or self.batcher is None:
            why = f"the model failed to load: {self.load_error}" if self.load_error else "the model is loading"
            raise UnavailableError(f"not ready: {why}", retry_after_s=5.0)

    # -- the request path, shared by every route that runs the model

    async def _handle(self, request: Request, work: Callable[[Handled], Awaitable[Any]], *,
                      timed: bool) -> Any:
        """auth → accepting → the key's limits → ``work`` counted in flight → metrics and one audit
        line, whatever the outcome. ``timed``: observe the latency histogram (``/v1/systemone`` only)."""
        t0 = time.perf_counter()
        who = self.authenticate(request)
        self.check_accepting()
        handled = Handled()
        status = 500
        acquired = False
        try:
            busy = self.batcher.retry_after_s() if self.batcher is not None else 1.0
            self.limiter.acquire(who.key_id, who.limits, busy_retry_s=busy)
            acquired = True
            self.in_flight += 1
            self.metrics.key_in_flight.labels(who.key_id).inc()
            result = await work(handled)
            status = 200
            assert handled.response is not None
            for answer in handled.response.answers.values():
                self.metrics.questions.labels(answer.type).inc()
            return result
        except RateLimitedError as e:
            status = http_status(e)
            self.metrics.key_limited.labels(who.key_id, e.limit).inc()
            raise
        except TypedDecisionsError as e:
            status = http_status(e)
            raise
        except ClientGone:
            status = CLIENT_CLOSED  # nobody reads this response; the audit line and metrics do
            return JSONResponse({"detail": {"error_type": "client_closed_error",
                                            "message": "client closed the connection"}}, status_code=status)
        finally:
            if acquired:
                self.limiter.release(who.key_id)
                self.metrics.key_in_flight.labels(who.key_id).dec()
                self.in_flight -= 1
                if self.in_flight == 0:
                    self._idle.set()
            self.metrics.key_requests.labels(who.key_id, str(status)).inc()
            seconds = time.perf_counter() - t0
            if status == 200 and timed:
                self.metrics.latency.observe(seconds)
            if self.audit is not None:
                self._audit(request, who, handled, status, seconds)

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

    async def decisions(self, request: Request) -> JSONResponse:
        """``POST /v1/decisions``: OpenAI's Decisions API, translated once in and once out
        (``decisions_api``); the same path as ``/v1/systemone`` between (limits, queue, audit),
        with the questions the compiler refuses answered as refusals (``set_aside``)."""

        async def work(handled: Handled) -> JSONResponse:
            s = self.settings
            translated = decisions_api.to_system_one(await self._read_json(request), max_questions=s.max_questions,
                                                     max_options=s.max_options, max_name_chars=s.max_name_chars)
            try:
                handled.parsed = parsed = parse_request(translated.request)
            except InvalidRequestError as e:
                raise decisions_api.retarget(e, translated) from None
            if parsed.model not in self.names:
                raise ModelNotFoundError(f"model {parsed.model!r} is not served here; available: "
                                         f"{', '.join(self.names)} (GET /v1/models)")
            try:
                result = await self._submit(Job(parsed, set_aside=True), request)
            except InvalidRequestError as e:
                raise decisions_api.retarget(e, translated) from None
            if not isinstance(result, Answered):  # a decider or dispatch that ignores set_aside
                result = Answered(result, Prepared(parsed))
            p = result.prepared
            handled.response = result.response or DecisionResponse(model=parsed.model, answers={},
                                                                   usage=Usage(input_tokens=0))
            return JSONResponse(decisions_out.to_decision(
                translated, handled.response.model, result.response, list(p.refused),
                cached_tokens=p.cached_tokens, cache_write_tokens=p.cache_write_tokens))

        return await self._handle(request, work, timed=True)

    async def preset(self, request: Request, name: str) -> dict[str, Any]:
        """``POST /v1/presets/{name}``: the preset's question, queued like any decision request;
        its body (``PresetRequest``) is read through the same bounds as the others."""

        async def work(handled: Handled) -> dict[str, Any]:
            try:
                body = PresetRequest.model_validate(await self._read_json(request))
            except ValidationError as e:
                raise InvalidRequestError("invalid preset request", errors=[
                    (tuple(err["loc"]), err["msg"]) for err in e.errors()]) from None
            call = prepare_preset(self.decider.name, self.presets.get(name, name), body.state, body.params,
                                  decider=self.decider)
            handled.preset = {"name": call.preset.name, "version": call.preset.version}
            handled.parsed = parse_request(call.request)
            handled.response = await self._submit(Job(handled.parsed, call.label_mode, heads=call.heads), request)
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
        """The body, bounded in bytes and time and decoded (``body``: 413/415/400/408), as JSON
        within the input bounds (``inputs``: 422)."""
        s = self.settings
        raw = await read_body(request.stream(), s.max_body_bytes, request.headers.get("content-length"),
                              timeout_s=s.body_timeout_s)
        value = parse_json(decode_body(raw, request.headers.get("content-encoding"), s.max_body_bytes))
        check_json(value, max_depth=s.max_json_depth, max_key_chars=s.max_name_chars)
        check_questions(value, max_questions=s.max_questions, max_options=s.max_options)
        return value

    def _audit(self, request: Request, who: Principal, handled: Handled, status: int, seconds: float) -> None:
        assert self.audit is not None
        parsed, response = handled.parsed, handled.response
        record = {
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
            "request_id": request.state.request_id, "key": who.key_id, "caller": who.caller,
            "status": status, "route": request.url.path,
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


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:  # "testserver" (in-process tests), a Unix socket's empty name
        return False
    return True


__all__ = ["ANONYMOUS", "ClientGone", "Job", "PresetRequest", "Principal", "SELF_TEST", "Service",
           "wait_disconnect"]
