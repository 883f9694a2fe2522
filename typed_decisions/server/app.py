"""The HTTP server: ``POST /v1/systemone`` wire-compatible with the hosted System One API.

typesafe-sdk (``TypeSafeClient(base_url="http://127.0.0.1:8000", api_key=...)``) works against it
unchanged. Routes::

    POST /v1/systemone   DecisionRequest → DecisionResponse (schema.py), micro-batched
    GET  /v1/models      {"models": [{"name", "description", "release_date"}]}: the model + aliases
    GET  /healthz        the process is up
    GET  /readyz         the model is loaded and answered a self-test decision (else 503)
    GET  /metrics        Prometheus text (one CollectorRegistry per app)

The request path, written once: auth (401) → accepting? (503) → multipart? (422: text-only
model) → bounded read + zstd/gzip (``server_body``: 413/415/400) → JSON + ``parse_request`` (422)
→ model name (404) → queue (``server_batching``: 429) → ``Decider.run_many`` on the engine thread →
``DecisionResponse.model_dump(mode="json")``. Every refusal is a ``TypedDecisionsError`` whose
status comes from ``errors.HTTP_STATUS``; the body has FastAPI's shape ``{"detail": [{"loc":
["body", ...field path], "msg", "type"}]}``; every response carries ``x-typesafe-request-id``.
Unexpected failures are logged with their traceback and answered 500 without it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from .compiler import LABEL_MODES, LabelMode
from .decider import parse_request
from .errors import (AuthenticationError, BadBodyError, BodyTooLargeError, InvalidRequestError,
                     ModelNotFoundError, ServerBusyError, TypedDecisionsError, UnavailableError,
                     UnsupportedEncodingError, http_status)
from .schema import DecisionRequest, DecisionResponse
from .server_batching import MicroBatcher
from .server_body import decode_body, read_body
from .server_observability import AuditLog, Metrics, state_sha256
from .server_settings import ENV_PREFIX, ServerSettings, load_api_keys

log = logging.getLogger("typed_decisions.server")

REQUEST_ID_HEADER = "x-typesafe-request-id"
SELF_TEST = {"state": "The server is starting.",
             "questions": {"ready": {"type": "noul", "instructions": "Is the server starting?"}}}


# --------------------------------------------------------------------------- errors → HTTP

# Where in the request each refusal points (InvalidRequestError carries its own field path).
_LOC: dict[type[TypedDecisionsError], tuple[str, ...]] = {
    AuthenticationError: ("header", "authorization"),
    ModelNotFoundError: ("body", "model"),
    BodyTooLargeError: ("body",),
    BadBodyError: ("body",),
    UnsupportedEncodingError: ("header", "content-encoding"),
}


def _error_type(error: Exception) -> str:
    """``TokenizerBoundaryError`` → ``tokenizer_boundary``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__.removesuffix("Error")).lower()


def error_response(error: TypedDecisionsError) -> JSONResponse:
    """The one translation of this package's errors into HTTP responses."""
    status = http_status(error)
    kind = getattr(error, "kind", None) or _error_type(error)
    if isinstance(error, InvalidRequestError):
        detail = [{"loc": ["body", *loc], "msg": msg, "type": kind} for loc, msg in error.errors]
    elif status == 500:  # a bug or an engine failure: details to the log only
        log.error("internal error", exc_info=error)
        detail = [{"loc": [], "msg": "internal error; the server log has the details",
                   "type": "internal"}]
    else:
        loc = next((v for c, v in _LOC.items() if isinstance(error, c)), ())
        detail = [{"loc": list(loc), "msg": str(error), "type": kind}]
    headers = {}
    if isinstance(error, ServerBusyError):
        headers = {"retry-after": str(max(1, math.ceil(error.retry_after_s))),
                   "retry-after-ms": str(max(1, int(error.retry_after_s * 1000)))}
    if isinstance(error, AuthenticationError):
        headers["www-authenticate"] = "Bearer"
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error: FastAPI's shape, ``loc`` = ["body", field path...] or ["header", name]."""

    detail: list[ErrorItem]


class ModelInfo(BaseModel):
    name: str
    description: str
    release_date: str


class ModelList(BaseModel):
    """``GET /v1/models``: the loaded model's name first, then its aliases."""

    models: list[ModelInfo]


# --------------------------------------------------------------------------- the service


class Service:
    """The state one app holds: the decider (once loaded), the batcher, metrics, lifecycle flags."""

    def __init__(self, decider_or_factory: Any, settings: ServerSettings):
        self.settings = settings
        is_decider = hasattr(decider_or_factory, "run_many")
        self.decider: Any = decider_or_factory if is_decider else None
        self.factory: Callable[[], Any] | None = None if is_decider else decider_or_factory
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="typed-decisions-engine")
        self.batcher: MicroBatcher[DecisionRequest, DecisionResponse] | None = None
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
            self.batcher = MicroBatcher(self.decider.run_many, self.executor, max_batch=s.max_batch,
                                        max_wait_s=s.max_wait_ms / 1000, queue_size=s.queue_size,
                                        on_batch=self._on_batch)
            self.batcher.start()
            await self.batcher.submit(parse_request({"model": self.decider.name, **SELF_TEST}))
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

    # -- the request path

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

    async def decide(self, request: Request) -> JSONResponse:
        t0 = time.perf_counter()
        caller = self.authenticate(request)
        self.check_accepting()
        self.in_flight += 1
        parsed: DecisionRequest | None = None
        response: DecisionResponse | None = None
        status = 500
        try:
            if request.headers.get("content-type", "").lower().startswith("multipart/"):
                raise InvalidRequestError(
                    "image attachments need a multimodal model; this server runs a text-only model. "
                    "Send the state as text, an object or an array (no assets).", ("assets",))
            limit = self.settings.max_body_bytes
            raw = await read_body(request.stream(), limit, request.headers.get("content-length"))
            body = decode_body(raw, request.headers.get("content-encoding"), limit)
            try:
                data = json.loads(body)
            except ValueError as e:  # includes UnicodeDecodeError
                err = InvalidRequestError(f"the body is not valid JSON: {e}")
                err.kind = "json_invalid"  # type: ignore[attr-defined]
                raise err from None
            parsed = parse_request(data)
            if parsed.model not in self.names:
                raise ModelNotFoundError(f"model {parsed.model!r} is not served here; available: "
                                         f"{', '.join(self.names)} (GET /v1/models)")
            assert self.batcher is not None
            response = await self.batcher.submit(parsed)
            status = 200
            for name, answer in response.answers.items():
                self.metrics.questions.labels(answer.type).inc()
            return JSONResponse(response.model_dump(mode="json"))
        except TypedDecisionsError as e:
            status = http_status(e)
            raise
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
            seconds = time.perf_counter() - t0
            if status == 200:
                self.metrics.latency.observe(seconds)
            if self.audit is not None:
                self._audit(request, caller, parsed, status, seconds, response)

    def _audit(self, request: Request, caller: str, parsed: DecisionRequest | None, status: int,
               seconds: float, response: DecisionResponse | None) -> None:
        assert self.audit is not None
        self.audit.write({
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
            "request_id": request.state.request_id, "caller": caller, "status": status,
            "model": parsed.model if parsed else None,
            "questions": {n: q.type for n, q in parsed.questions.items()} if parsed else None,
            "answers": response.model_dump(mode="json")["answers"] if response else None,
            "input_tokens": response.usage.input_tokens if response else None,
            "latency_ms": round(seconds * 1000, 2),
            "state_sha256": state_sha256(parsed.state) if parsed else None,
        })

    def release_date(self) -> str:
        if self.settings.release_date is not None:
            return self.settings.release_date.isoformat()
        root = getattr(getattr(self.decider, "artifacts", None), "root", None)
        manifest = Path(root) / "manifest.json" if root is not None else None
        if manifest is not None and manifest.is_file():
            return dt.date.fromtimestamp(manifest.stat().st_mtime).isoformat()
        return dt.date.today().isoformat()


# --------------------------------------------------------------------------- the app


class PresetRequest(BaseModel):
    """Body of ``POST /v1/presets/{name}``: the state, and optional ``label_mode`` / ``threshold``."""

    model_config = {"extra": "forbid"}
    state: str | dict[str, Any] | list[Any]
    params: dict[str, Any] = {}


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """FastAPI's schema plus the DecisionRequest body (the handler reads the raw body itself)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                                 description=app.description)
            req = DecisionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(req.pop("$defs", {}))
            components["DecisionRequest"] = req
            schema["paths"]["/v1/systemone"]["post"]["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DecisionRequest"}}}}
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


def create_app(decider_or_factory: Any, *, settings: ServerSettings | None = None) -> FastAPI:
    """The app for one model: a loaded ``Decider`` (or any object with ``name`` and ``run_many``),
    or a zero-argument factory returning one (loaded in the background; /readyz says when)."""
    from . import __version__

    service = Service(decider_or_factory, settings or ServerSettings())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        await service.start()
        yield
        await service.stop()

    app = FastAPI(title="typed-decisions", version=__version__, lifespan=lifespan,
                  description="System One (noul / choice / score) from an exported LM on ONNX Runtime.")
    app.state.service = service
    errors = {s: {"model": ErrorBody} for s in (400, 401, 404, 413, 415, 422, 429, 503)}

    @app.middleware("http")
    async def request_id(request: Request, call_next):  # type: ignore[no-untyped-def]
        rid = "req_" + uuid.uuid4().hex
        request.state.request_id = rid
        try:
            response = await call_next(request)
        except Exception:  # noqa: BLE001 - never a stack trace to the client
            log.exception("unhandled error in request %s", rid)
            response = JSONResponse({"detail": [{"loc": [], "msg": "internal error; the server log "
                                                 "has the details", "type": "internal"}]}, status_code=500)
        response.headers[REQUEST_ID_HEADER] = rid
        route = request.scope.get("route")
        service.metrics.requests.labels(getattr(route, "path", "other"), str(response.status_code)).inc()
        return response

    @app.exception_handler(TypedDecisionsError)
    async def _typed(request: Request, error: TypedDecisionsError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": [{"loc": [], "msg": str(error.detail), "type": "http_error"}]},
                            status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in error.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.post("/v1/systemone", responses={200: {"model": DecisionResponse}, **errors},
              summary="Answer typed questions (noul / choice / score) about a state")
    async def systemone(request: Request) -> JSONResponse:
        return await service.decide(request)

    @app.get("/v1/models", responses={200: {"model": ModelList}, 401: {"model": ErrorBody}})
    async def models(request: Request) -> ModelList:
        service.authenticate(request)
        service.check_accepting()
        description = service.settings.description or (
            f"{service.decider.name}: typed decisions from an exported LM on ONNX Runtime (text only)")
        date = service.release_date()
        return ModelList(models=[ModelInfo(name=n, description=description, release_date=date)
                                 for n in service.names])

    @app.get("/v1/presets", responses={401: {"model": ErrorBody}},
             summary="The versioned question presets this server can answer")
    async def presets(request: Request) -> dict[str, Any]:
        from .presets import list_presets, load_preset

        service.authenticate(request)
        items = [load_preset(n) for n in list_presets()]
        return {"presets": [{"name": p.name, "version": p.version, "type": p.question.type,
                             "description": p.description} for p in items]}

    @app.post("/v1/presets/{name}", responses={401: {"model": ErrorBody}, 422: {"model": ErrorBody}},
              summary="Ask a preset's question about a state: answers, the act flag, the preset version")
    async def preset(name: str, body: PresetRequest, request: Request) -> dict[str, Any]:
        # A separate endpoint, so /v1/systemone stays strictly the System One wire format.
        from .presets import answer_preset

        service.authenticate(request)
        service.check_accepting()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(service.executor, answer_preset, service.decider, name,
                                          body.state, body.params)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> dict[str, Any]:
        service.check_accepting()
        return {"status": "ready", "model": service.decider.name, "aliases": service.names[1:]}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(service.metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app


# --------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    env = lambda name, default=None: os.environ.get(ENV_PREFIX + name) or default  # noqa: E731
    p = argparse.ArgumentParser(prog="typed-decisions serve", description=(
        "Serve POST /v1/systemone (typesafe-sdk compatible) for one exported model. Every option "
        f"also reads {ENV_PREFIX}<OPTION> (e.g. {ENV_PREFIX}MAX_BATCH); flags win."))
    p.add_argument("--model", type=Path, default=env("MODEL"), required=env("MODEL") is None,
                   help="exported model directory")
    p.add_argument("--host", default=env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("PORT", "8000")))
    p.add_argument("--threads", type=int, default=env("THREADS"),
                   help="ONNX Runtime intra-op threads (default: all cores)")
    p.add_argument("--labels", choices=LABEL_MODES, default=env("LABELS", "auto"))
    p.add_argument("--max-prompt-tokens", type=int, default=env("MAX_PROMPT_TOKENS"),
                   help="refuse (422) prompts longer than this (default: the model's context)")
    p.add_argument("--api-keys-file", type=Path, default=None,
                   help="file of 'KEY' or 'ID KEY' lines (also TYPED_DECISIONS_API_KEYS_FILE)")
    p.add_argument("--alias", action="append", default=None, dest="aliases",
                   help="extra model name (repeatable; default: jev-latest)")
    p.add_argument("--max-batch", type=int, default=None)
    p.add_argument("--max-wait-ms", type=float, default=None)
    p.add_argument("--queue-size", type=int, default=None)
    p.add_argument("--max-body-bytes", type=int, default=None)
    p.add_argument("--audit-log", type=Path, default=None)
    p.add_argument("--log-level", default=env("LOG_LEVEL", "info"))
    return p


def main(argv: list[str] | None = None) -> int:
    """``typed-decisions serve``: load the model, serve until SIGINT/SIGTERM, drain, exit.

    After draining, uvicorn re-raises the signal, so the process ends *by* SIGTERM (which systemd
    and Kubernetes count as a clean stop); a stop by other means returns 0."""
    import uvicorn

    from .decider import Decider

    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ServerSettings.from_env(
        aliases=args.aliases, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
        queue_size=args.queue_size, max_body_bytes=args.max_body_bytes, audit_log=args.audit_log)
    if args.api_keys_file is not None:
        settings.api_keys.update(load_api_keys(args.api_keys_file))
    threads = int(args.threads) if args.threads else None
    max_tokens = int(args.max_prompt_tokens) if args.max_prompt_tokens else None
    labels: LabelMode = args.labels
    app = create_app(lambda: Decider.from_dir(args.model, threads=threads, label_mode=labels,
                                              max_tokens=max_tokens), settings=settings)
    service: Service = app.state.service

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:  # new requests → 503 at once
            service.begin_shutdown()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                            timeout_graceful_shutdown=int(settings.shutdown_timeout_s))
    Server(config).run()
    return 0


__all__ = ["ServerSettings", "create_app", "error_response", "load_api_keys", "main", "state_sha256"]
