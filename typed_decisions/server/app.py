"""The HTTP app: ``POST /v1/systemone`` wire-compatible with the hosted System One API.

typesafe-sdk (``TypeSafeClient(base_url="http://127.0.0.1:8000", api_key=...)``) works against it
unchanged. Routes::

    POST /v1/systemone       DecisionRequest → DecisionResponse (schema.py), micro-batched
    POST /v1/decisions       OpenAI's Decisions API → Decision (decisions_api.py in, decisions_out.py out), the same path;
                             its errors in OpenAI's shape, {"error": {message, type, param, code}}
    POST /v1/explain         DecisionRequest → Explanation (explain.py): answers + why, same queue
    GET  /v1/presets         the question presets: shipped (presets/) and the operator's (--preset FILE)
    GET  /v1/presets/{name}  one preset, and its question in wire form
    POST /v1/presets/{name}  a preset's question about a state, through the same queue
    GET  /playground         a static page (no build step, no CDN) that asks and explains
    GET  /v1/models          {"models": [{"name", "description", "release_date"}]}: the model + aliases
    GET  /healthz            the process is up
    GET  /readyz             the model is loaded and answered a self-test decision (else 503)
    GET  /metrics            Prometheus text (one CollectorRegistry per app; needs a key when keys are set)

Every route that runs the model (the three POSTs) takes ``service.py``'s request path (auth,
per-key limits, bounded bodies, queue, audit, drain);
this module builds the app around it (``create_app``) and translates errors once: every refusal
is a ``TypedDecisionsError`` whose status comes from ``errors.HTTP_STATUS``. Two body shapes, as
the System One spec has them (jevcompat's ``errors.validation-shape`` / ``errors.shape``) and as
typesafe-sdk parses them:

- 422, a request that cannot be answered as sent: FastAPI's list,
  ``{"detail": [{"loc": ["body", ...field path], "msg", "type"}]}``;
- every other 4xx/5xx: ``{"detail": {"error_type": "authentication_error", "message": "..."}}``,
  ``error_type`` the error class in snake case (``ERROR_TYPES``).

Every response carries ``x-typesafe-request-id``. Unexpected failures are logged with their
traceback and answered 500 (``internal_error``) without it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from prometheus_client import generate_latest
from prometheus_client.registry import Collector
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (REFUSALS, AuthenticationError, InvalidRequestError, ModelNotFoundError,
                      RateLimitedError, ServerBusyError, TypedDecisionsError, http_status, wire_error_type)
from ..presets import list_presets, load_preset
from ..explain import Explanation
from ..schema import DecisionRequest, DecisionResponse
from . import decisions_out
from .decisions_out import Decision
from .decisions_schema import DECISION_ERRORS, DecisionCreateParams
from .service import Job, PresetRequest, Service
from .settings import ANONYMOUS_WARNING, ServerSettings

log = logging.getLogger("typed_decisions.server")

REQUEST_ID_HEADER = "x-typesafe-request-id"
INTERNAL = {"error_type": "internal_error", "message": "internal error; the server log has the details"}


# --------------------------------------------------------------------------- errors → HTTP

def _snake(name: str) -> str:
    """``TokenizerBoundaryError`` → ``tokenizer_boundary_error``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _error_type(error: Exception) -> str:
    """A 422 item's ``type``: ``TokenizerBoundaryError`` → ``tokenizer_boundary`` (unchanged since 0.1)."""
    return _snake(type(error).__name__.removesuffix("Error"))


def _internal(error: TypedDecisionsError) -> bool:
    """A bug or an engine failure (500): its details go to the log only. 503 (loading, draining)
    is a refusal like 429, not a failure."""
    return http_status(error) >= 500 and not isinstance(error, ServerBusyError)


def error_type(error: TypedDecisionsError) -> str:
    """The ``error_type`` of a non-validation error: its class in snake case
    (``errors.wire_error_type``), so a client maps it back to the class: ``AuthenticationError``
    → ``authentication_error``, the name the spec requires for auth failures;
    ``RateLimitedError`` → ``rate_limited_error``. ``internal_error`` for a failure."""
    return "internal_error" if _internal(error) else wire_error_type(type(error))


# The refusals the server makes and their error_type (docs/deploy.md lists the same).
ERROR_TYPES: dict[type[TypedDecisionsError], str] = {cls: wire_error_type(cls) for cls in REFUSALS}


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """``{"detail": {"error_type", "message"}}``: the body of every error but a 422 (which keeps
    FastAPI's list, ``ValidationErrorBody``)."""
    return {"detail": {"error_type": error_type, "message": message}}


def error_response(error: TypedDecisionsError) -> JSONResponse:
    """The one translation of this package's errors into HTTP responses."""
    status = http_status(error)
    if isinstance(error, InvalidRequestError):
        kind = getattr(error, "kind", None) or _error_type(error)
        body: dict[str, Any] = {"detail": [{"loc": ["body", *loc], "msg": msg, "type": kind}
                                           for loc, msg in error.errors]}
    elif _internal(error):  # a bug or an engine failure: details to the log only
        log.error("internal error", exc_info=error)
        body = {"detail": dict(INTERNAL)}
    else:
        body = error_body(error_type(error), str(error))
    headers = {}
    if isinstance(error, ServerBusyError):
        headers = {"retry-after": str(max(1, math.ceil(error.retry_after_s))),
                   "retry-after-ms": str(max(1, int(error.retry_after_s * 1000)))}
    if isinstance(error, RateLimitedError):
        headers["x-limit-hit"] = error.limit  # key_concurrency | key_requests_per_minute | queue_size
    if isinstance(error, AuthenticationError):
        headers["www-authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=headers)


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """422: FastAPI's shape, ``loc`` = ["body", field path...]; one item per problem found."""

    detail: list[ErrorItem]


class ErrorDetail(BaseModel):
    error_type: str
    message: str


class ErrorBody(BaseModel):
    """Every other error: ``error_type`` (the error class in snake case: ``authentication_error``,
    ``model_not_found_error``, ``rate_limited_error``, ``unavailable_error``, ``internal_error``, ...)
    and a message saying what to change."""

    detail: ErrorDetail


class ModelInfo(BaseModel):
    name: str
    description: str
    release_date: str


class ModelList(BaseModel):
    """``GET /v1/models``: the loaded model's name first, then its aliases; ``warning`` only when
    the server accepts anonymous callers (clients ignore unknown fields)."""

    models: list[ModelInfo]
    warning: str | None = None


ERRORS: dict[int | str, dict[str, Any]] = {
    **{s: {"model": ErrorBody} for s in (400, 401, 404, 408, 413, 415, 429, 503)},
    422: {"model": ValidationErrorBody}}


# --------------------------------------------------------------------------- the app, step by step


def _add_request_ids(app: FastAPI, service: Service) -> None:
    """Every response gets ``x-typesafe-request-id`` and is counted by route and status; an
    exception that escaped every handler becomes a 500 without its traceback."""

    @app.middleware("http")
    async def request_id(request: Request, call_next):  # type: ignore[no-untyped-def]
        rid = "req_" + uuid.uuid4().hex
        request.state.request_id = rid
        try:
            response = await call_next(request)
        except Exception:  # noqa: BLE001 - never a stack trace to the client
            log.exception("unhandled error in request %s", rid)
            response = JSONResponse({"detail": dict(INTERNAL)}, status_code=500)
        response.headers[REQUEST_ID_HEADER] = rid
        route = request.scope.get("route")
        service.metrics.requests.labels(getattr(route, "path", "other"), str(response.status_code)).inc()
        return response


def _add_error_handlers(app: FastAPI) -> None:
    """Ours via ``error_response``; Starlette's and FastAPI's own in the same two body shapes
    (a route that does not exist: 404 ``not_found_error``; a wrong method: 405
    ``method_not_allowed_error``)."""

    @app.exception_handler(TypedDecisionsError)
    async def _typed(request: Request, error: TypedDecisionsError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        try:
            phrase = HTTPStatus(error.status_code).phrase
        except ValueError:
            phrase = "HTTP"
        kind = re.sub(r"[^a-z0-9]+", "_", phrase.lower()).strip("_") + "_error"
        message = f"{request.method} {request.url.path}: {error.detail}"
        return JSONResponse(error_body(kind, message),
                            status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in error.errors()]
        return JSONResponse({"detail": detail}, status_code=422)


def _add_decision_routes(app: FastAPI, service: Service) -> None:
    """``/v1/systemone``, ``/v1/decisions`` (OpenAI's shape, ``decisions_api.py``), ``/v1/explain``
    and ``/v1/models``."""

    @app.post("/v1/systemone", responses={200: {"model": DecisionResponse}, **ERRORS},
              summary="Answer typed questions (noul / choice / score) about a state")
    async def systemone(request: Request) -> JSONResponse:
        return await service.decide(request)

    @app.post("/v1/decisions", responses={200: {"model": Decision}, **DECISION_ERRORS},
              summary="OpenAI's Decisions API: predicate / choice / score questions about an input")
    async def decisions(request: Request) -> JSONResponse:
        # errors in OpenAI's shape on this door ({"error": {message, type, param, code}}), so the
        # openai SDK raises its own classes; /v1/systemone keeps System One's
        try:
            return await service.decisions(request)
        except TypedDecisionsError as e:
            return decisions_out.error_response(e)
        except Exception:  # noqa: BLE001 - never a stack trace to the client
            log.exception("unhandled error in /v1/decisions")
            return JSONResponse(decisions_out.error_body(INTERNAL["message"], "server_error", None,
                                                         "internal_error"), status_code=500)

    @app.post("/v1/explain", responses={200: {"model": Explanation}, **ERRORS},
              summary="Answer a request and explain it: prompt, label tokens, logits, probabilities")
    async def explain(request: Request) -> JSONResponse:
        return await service.explain(request)

    @app.get("/v1/models", responses={200: {"model": ModelList}, 401: {"model": ErrorBody}},
             response_model_exclude_none=True)
    async def models(request: Request) -> ModelList:
        service.authenticate(request)
        service.check_accepting()
        description = service.settings.description or (
            f"{service.decider.name}: typed decisions from an exported LM on ONNX Runtime (text only)")
        date = service.release_date()
        warning = None
        if not service.settings.api_keys:
            warning = (ANONYMOUS_WARNING if service.settings.allow_anonymous else
                       "anonymous access: no API keys are configured, so only loopback callers are served")
        return ModelList(models=[ModelInfo(name=n, description=description, release_date=date)
                                 for n in service.names], warning=warning)


def _add_preset_routes(app: FastAPI, service: Service) -> None:
    """``/v1/presets``: a separate route, so ``/v1/systemone`` stays strictly the System One format."""

    @app.get("/v1/presets", responses={401: {"model": ErrorBody}},
             summary="The versioned question presets this server can answer")
    async def presets(request: Request) -> dict[str, Any]:
        service.authenticate(request)
        items = [*service.presets.values(), *(load_preset(n) for n in list_presets() if n not in service.presets)]
        return {"presets": [{"name": p.name, "version": p.version, "type": p.question.type,
                             "description": p.description} for p in items]}

    @app.get("/v1/presets/{name}", responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}},
             summary="One preset (its file) and its question in wire form")
    async def preset_file(name: str, request: Request) -> dict[str, Any]:
        service.authenticate(request)
        if name not in service.presets and name not in list_presets():  # never a client's path
            raise ModelNotFoundError(f"unknown preset {name!r}; served: {', '.join([*service.presets, *list_presets()])}")
        p = service.presets.get(name) or load_preset(name)
        return {"preset": p.model_dump(mode="json", exclude_none=True), "question": p.question_spec().question()}

    @app.post("/v1/presets/{name}", responses={**ERRORS},
              summary="Ask a preset's question about a state: answers, the act flag, the preset version")
    async def preset(name: str, request: Request) -> dict[str, Any]:
        return await service.preset(request, name)


def _add_playground(app: FastAPI) -> None:
    """``/playground`` (and ``/`` → it): the static page; it calls the JSON API like any client."""
    page = (Path(__file__).parent / "static" / "playground.html").read_text(encoding="utf-8")

    @app.get("/playground", response_class=HTMLResponse, include_in_schema=False)
    async def playground() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/playground")


def _add_operations_routes(app: FastAPI, service: Service) -> None:
    """``/healthz``, ``/readyz``, ``/metrics``: for the orchestrator and the scraper."""

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> dict[str, Any]:
        service.check_accepting()
        return {"status": "ready", "model": service.decider.name, "aliases": service.names[1:]}

    @app.get("/metrics", response_class=PlainTextResponse, responses={401: {"model": ErrorBody}})
    async def metrics(request: Request) -> PlainTextResponse:
        service.authenticate(request)  # per-key counters name the keys: not for anonymous eyes
        return PlainTextResponse(generate_latest(service.metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)


def _add_component(components: dict[str, Any], model: type[BaseModel]) -> None:
    """``model``'s schema and its definitions as components; a definition may not replace another
    of the same name (``/v1/decisions``'s models are named ``Decision...`` for that)."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in {**schema.pop("$defs", {}), model.__name__: schema}.items():
        assert components.setdefault(name, definition) == definition, f"two OpenAPI components named {name}"


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """FastAPI's schema plus the request bodies (the handlers read the raw bodies themselves,
    through the service's bounds; ``/v1/decisions`` translates its own by hand, and its published
    body, ``decisions_schema.py``, is what OpenAI's SDK sends)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                                 description=app.description)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (DecisionRequest, PresetRequest, DecisionCreateParams):
                _add_component(components, model)
            for path, model in (("/v1/systemone", "DecisionRequest"), ("/v1/explain", "DecisionRequest"),
                                ("/v1/presets/{name}", "PresetRequest"), ("/v1/decisions", "DecisionCreateParams")):
                schema["paths"][path]["post"]["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}}}
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


def create_app(decider_or_factory: Any, *, settings: ServerSettings | None = None,
               dispatch: Callable[[Job], Awaitable[Any]] | None = None,
               collectors: Iterable[Collector] = ()) -> FastAPI:
    """The app for one model: a loaded ``Decider`` (or any object with ``name`` and ``run_many``;
    one that also has ``answer_jobs(jobs)`` gets the micro-batcher's batches as Jobs, to answer
    where its model is), or a zero-argument factory returning one (loaded in the background;
    /readyz says when).

    ``dispatch``: for a decider that batches downstream (Ray Serve with ``@serve.batch``), a
    coroutine answering one ``Job`` as ``answer_jobs`` would (a ``set_aside`` Job with its
    refused questions set aside); each request is handed to it at once instead of to the
    micro-batcher (``batching.Unbatched``).

    ``collectors``: Prometheus collectors (objects with ``collect()``, and ``describe()``) whose
    metrics ``/metrics`` shows beside the app's own, in the app's registry (Ray Serve's per-replica
    counters)."""
    from .. import __version__

    service = Service(decider_or_factory, settings or ServerSettings(), dispatch=dispatch)
    for collector in collectors:
        service.metrics.registry.register(collector)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        await service.start()
        yield
        await service.stop()

    app = FastAPI(title="typed-decisions", version=__version__, lifespan=lifespan,
                  description="System One (noul / choice / score) from an exported LM on ONNX Runtime.")
    app.state.service = service
    _add_request_ids(app, service)
    _add_error_handlers(app)
    _add_decision_routes(app, service)
    _add_preset_routes(app, service)
    _add_operations_routes(app, service)
    _add_playground(app)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app


__all__ = ["ERROR_TYPES", "ErrorBody", "PresetRequest", "REQUEST_ID_HEADER", "ValidationErrorBody", "create_app",
           "error_body", "error_response", "error_type"]
