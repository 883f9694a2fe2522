"""Where decisions are computed, seen from a caller: this process's engine or a remote server.

The engine modules (compiler, engine, reducers, decider) answer requests; the server serves them;
this module is the caller's side of both, written once for every integration (LangChain, DSPy):

- ``Backend``: the protocol. System One wire requests in, one ``DecisionResponse`` per request
  out (``run_many`` / ``arun_many``); ``name`` is the model name put on every request.
- ``LocalBackend``: a ``typed_decisions.decider.Decider`` in this process (or the path of an
  export, loaded once per process). ``run_many`` is ONE engine call for all requests, so a batch
  about related states prefills shared prefixes once; async calls run it in a worker thread.
- ``RemoteBackend``: ``POST {base_url}/v1/systemone`` with a Bearer key, over httpx (imported
  only here: ``pip install 'typed-decisions-runtime[client]'``); one HTTP request per wire
  request, sequential in sync code and concurrent in async code. A failed response becomes the
  runtime's own error class again, through the table the server maps from (``errors.HTTP_STATUS``).
- ``make_backend``: one of the above from ``decider=`` or ``base_url=``, refusing mixtures.

Nothing here re-derives probabilities: answers are the core's ``DecisionResponse`` models.

>>> backend = make_backend(decider="~/.cache/typed-decisions/exports/tiny")   # doctest: +SKIP
>>> backend.run_many([{"model": backend.name, "state": "I was charged twice.",
...                    "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}}}])  # doctest: +SKIP
[DecisionResponse(model='tiny', answers={'urgent': NoulAnswer(noul=0.62)}, ...)]
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from typed_decisions.errors import (HTTP_STATUS, REFUSALS, AuthenticationError, EngineError, InvalidRequestError,
                                    RateLimitedError, ServerBusyError, TypedDecisionsError, wire_error_type)
from typed_decisions.exports import locate
from typed_decisions.schema import DecisionResponse

if TYPE_CHECKING:
    import httpx

    from typed_decisions.decider import Decider
    from typed_decisions.fitted import FittedHead

API_KEY_ENV = "TYPED_DECISIONS_API_KEY"
# Seconds a remote call may take. A CPU server answers a 3-question request on the 1.5B default
# model in ~9 s when idle and took 36-48 s on a loaded 2-core server (docs/deploy.md): 30 s cut
# those off, and a client that times out and retries only adds load. 120 s covers a full queue.
DEFAULT_TIMEOUT_S = 120.0
WireRequest = Mapping[str, Any]


@runtime_checkable
class Backend(Protocol):
    """Answers System One wire requests. ``name`` is the model name put on every request."""

    name: str

    def run_many(self, requests: Sequence[WireRequest]) -> list[DecisionResponse]: ...

    async def arun_many(self, requests: Sequence[WireRequest]) -> list[DecisionResponse]: ...


@functools.lru_cache(maxsize=8)
def _load_decider(path: str) -> Decider:
    """One loaded engine per export directory per process (backends built from a path share it)."""
    from typed_decisions.decider import Decider

    return Decider.load(path)


class LocalBackend:
    """A ``Decider`` in this process, or the path of an exported model directory.

    Args:
        decider: a ``typed_decisions.decider.Decider`` (or anything with its ``run_many`` and
            ``name``), an export directory or a catalogue model name (``"default"``,
            ``"tiny:int8"``; ``exports.locate``), loaded once per process and shared.
    """

    def __init__(self, decider: Decider | str | os.PathLike[str]):
        if isinstance(decider, (str, os.PathLike)):
            decider = _load_decider(str(locate(os.fspath(decider)).resolve()))
        self.decider = decider
        self.name: str = decider.name

    def run_many(self, requests: Sequence[WireRequest], *,
                 heads: Sequence[Mapping[str, FittedHead] | None] | None = None) -> list[DecisionResponse]:
        """``Decider.run_many``; ``heads``: per request, fitted heads by question name (``fitted.py``)."""
        if not requests:
            return []
        if heads is not None and any(heads):
            return self.decider.run_many(list(requests), heads=list(heads))
        return self.decider.run_many(list(requests))

    async def arun_many(self, requests: Sequence[WireRequest], *,
                        heads: Sequence[Mapping[str, FittedHead] | None] | None = None) -> list[DecisionResponse]:
        return await asyncio.to_thread(functools.partial(self.run_many, requests, heads=heads))

    @property
    def cache_key(self) -> dict[str, Any]:
        """What, besides the request, changes the answers (for a caller's cache, e.g. DSPy's):
        the export, the label mode, the confidence formula and the calibration file."""
        d = self.decider
        cal = getattr(d, "calibration", None)
        return {"export": str(getattr(getattr(d, "artifacts", None), "root", "")),
                "label_mode": getattr(d, "label_mode", None),
                "confidence": getattr(d, "confidence_kind", None),
                "calibration": f"{cal.model}@v{cal.version}" if cal is not None else None}

    def __repr__(self) -> str:
        return f"LocalBackend(model={self.name!r})"


def _error_class(status: int) -> type[TypedDecisionsError]:
    """The runtime error class for an HTTP status: the ``HTTP_STATUS`` entry that maps to it.

    A status several classes share (500: artifact, engine or any other failure) cannot be told
    apart from the outside, nor can one the table lacks: those are ``EngineError`` from 5xx and
    ``TypedDecisionsError`` otherwise. 422 → InvalidRequestError, 429 → ServerBusyError,
    503 → UnavailableError, 500 / 502 → EngineError, 418 → TypedDecisionsError.
    """
    matches = [cls for cls, s in HTTP_STATUS.items() if s == status]
    if len(matches) == 1:
        return matches[0]
    return EngineError if status >= 500 else TypedDecisionsError


def _status_of(cls: type[TypedDecisionsError]) -> int:
    """The HTTP status the server answers ``cls`` with (the first ``HTTP_STATUS`` entry in its MRO)."""
    return next(HTTP_STATUS[c] for c in cls.__mro__ if c in HTTP_STATUS)


def _error_for(response: httpx.Response) -> TypedDecisionsError:
    """Translate a failed HTTP response once, back into the runtime's error classes.

    Two body shapes, as the server (and the System One spec) sends them:

    - a 422: FastAPI's ``{"detail": [{"loc", "msg", "type"}]}``; its items become the
      ``InvalidRequestError``'s ``(loc, msg)`` pairs without the leading ``body``, e.g.
      ``["body", "questions", "team"]`` → ``("questions", "team")``;
    - any other status: ``{"detail": {"error_type", "message"}}``; an ``error_type`` naming one
      of the server's refusals (``errors.REFUSALS``: ``rate_limited_error`` → ``RateLimitedError``,
      its limit from ``x-limit-hit``) picks that class, else the status does (``_error_class``).

    A list for another status (servers before the spec's envelope), a string or any other body
    becomes one message.
    """
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    kind = None
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        kind = detail.get("error_type")
        detail = [{"loc": [], "msg": detail["message"]}]
    if not isinstance(detail, list) or not detail or not all(isinstance(d, dict) for d in detail):
        detail = [{"loc": [], "msg": str(detail or response.text or response.reason_phrase)}]
    items = [(tuple(d.get("loc") or ())[1 if (d.get("loc") or [None])[0] == "body" else 0:],
              str(d.get("msg", ""))) for d in detail]
    cls = next((c for c in REFUSALS if wire_error_type(c) == kind and _status_of(c) == response.status_code),
               None) or _error_class(response.status_code)
    if issubclass(cls, InvalidRequestError):
        return cls(items[0][1], items[0][0], errors=items)
    text = f"server answered {response.status_code}: " + "; ".join(m for _, m in items)
    if issubclass(cls, ServerBusyError):
        try:
            retry = float(response.headers.get("retry-after", 1.0))
        except ValueError:  # an HTTP date: not worth parsing for a hint
            retry = 1.0
        if issubclass(cls, RateLimitedError):
            return cls(text, limit=response.headers.get("x-limit-hit", ""), retry_after_s=retry)
        return cls(text, retry_after_s=retry)
    if issubclass(cls, AuthenticationError):
        text += f" (check api_key= or the {API_KEY_ENV} variable)"
    return cls(text)


class RemoteBackend:
    """A typed-decisions (or any System One) server: ``POST {base_url}/v1/systemone``.

    Args:
        base_url: server address, e.g. ``http://localhost:8000``.
        model: model name sent on every request that does not name one.
        api_key: Bearer key; defaults to the ``TYPED_DECISIONS_API_KEY`` environment variable.
            Never shown by ``repr`` nor part of ``cache_key``.
        timeout: seconds per HTTP request (default ``DEFAULT_TIMEOUT_S`` = 120: fits CPU latency
            under load; see docs/deploy.md before lowering it).
        client_kwargs: extra keyword arguments for ``httpx.Client`` / ``httpx.AsyncClient``
            (a proxy, custom headers, or ``transport=httpx.MockTransport(...)`` in tests).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, client_kwargs: Mapping[str, Any] | None = None):
        try:
            import httpx  # noqa: F401  (fail here, at construction, not at the first request)
        except ImportError:
            raise ImportError("RemoteBackend needs httpx: pip install httpx "
                              "(or pip install 'typed-decisions-runtime[client]')") from None
        self.base_url = base_url.rstrip("/")
        self.name = model
        self.timeout = timeout
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client_kwargs = dict(client_kwargs or {})
        self._client: httpx.Client | None = None

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/systemone"

    @property
    def cache_key(self) -> dict[str, Any]:
        """What, besides the request, changes the answers: the server."""
        return {"base_url": self.base_url}

    def _payload(self, request: WireRequest) -> dict[str, Any]:
        return {**request, "model": request.get("model") or self.name}

    def _parse(self, response: httpx.Response) -> DecisionResponse:
        if response.status_code >= 400:
            raise _error_for(response)
        return DecisionResponse.model_validate(response.json())

    def run_many(self, requests: Sequence[WireRequest]) -> list[DecisionResponse]:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, **self._client_kwargs)
        return [self._parse(self._client.post(self.url, json=self._payload(r), headers=self._headers))
                for r in requests]

    async def arun_many(self, requests: Sequence[WireRequest]) -> list[DecisionResponse]:
        import httpx

        # A client per call: an AsyncClient's connections belong to one event loop.
        async with httpx.AsyncClient(timeout=self.timeout, **self._client_kwargs) as client:
            responses = await asyncio.gather(
                *(client.post(self.url, json=self._payload(r), headers=self._headers) for r in requests))
        return [self._parse(r) for r in responses]

    def close(self) -> None:
        """Close the sync client's connections (a later call opens new ones)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __repr__(self) -> str:  # never shows the key
        return f"RemoteBackend(base_url={self.base_url!r}, model={self.name!r})"


def make_backend(*, decider: Any = None, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 client_kwargs: Mapping[str, Any] | None = None) -> Backend:
    """Build a backend from exactly one of ``decider`` and ``base_url``.

    ``decider`` is a ``Decider``, an export directory (→ ``LocalBackend``) or a ready ``Backend``
    (returned as is, to share one between callers); ``base_url`` with ``model`` (and optionally
    ``api_key``, ``timeout``, ``client_kwargs``) → ``RemoteBackend``. Any other combination is
    refused with a ``ValueError`` / ``TypeError`` saying what to change.
    """
    if (decider is None) == (base_url is None):
        raise ValueError("give exactly one of decider= (a typed_decisions Decider, an exported model "
                         "directory, or a Backend) and base_url= (a typed-decisions server)")
    if base_url is not None:
        if not model:
            raise ValueError("remote mode needs model= (the model name the server should answer with)")
        return RemoteBackend(base_url, model, api_key=api_key, timeout=timeout, client_kwargs=client_kwargs)
    if model is not None or api_key is not None or client_kwargs:
        raise ValueError("model=, api_key= and client_kwargs= apply to remote mode (base_url=) only; "
                         "a local Decider answers with its own model")
    if isinstance(decider, (str, os.PathLike)):
        return LocalBackend(decider)
    if isinstance(decider, Backend):
        return decider
    if hasattr(decider, "run_many") and hasattr(decider, "name"):
        return LocalBackend(decider)
    raise TypeError(f"decider= must be a typed_decisions Decider, an exported model directory or a "
                    f"Backend, not {type(decider).__name__}")


__all__ = ["API_KEY_ENV", "Backend", "DEFAULT_TIMEOUT_S", "LocalBackend", "RemoteBackend", "WireRequest", "make_backend"]
