"""Per-key limits: concurrent requests and requests per minute, so one caller cannot starve the rest.

Each key (anonymous callers share the id ``anonymous``) has

- a **concurrency** bound: requests of that key between authentication and answer (body reading
  included, so slow bodies count) — beyond it ``RateLimitedError(limit="key_concurrency")``;
- a **token bucket** of ``burst`` tokens refilled at ``rpm / 60`` per second; each request takes one,
  an empty bucket refuses with ``limit="key_requests_per_minute"`` and the exact wait for the next
  token as ``Retry-After``.

The queue bound (``batching``: ``limit="queue_size"``) still holds for all keys together; with the
per-key bound below the queue size, one key alone cannot fill it. The clock is injectable, so the
bucket is tested without sleeping. The app turns the error into 429 + ``Retry-After`` +
``x-limit-hit`` (``app.error_response``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import RateLimitedError


@dataclass
class TokenBucket:
    """``capacity`` tokens, refilled at ``rate`` per second (continuous).

    >>> b = TokenBucket(rate=1.0, capacity=2, tokens=2, stamp=0.0)
    >>> b.take(0.0), b.take(0.0), b.take(0.0), b.take(0.5), b.take(1.0)
    (0.0, 0.0, 1.0, 0.5, 0.0)
    """

    rate: float
    capacity: float
    tokens: float
    stamp: float

    def take(self, now: float) -> float:
        """Take one token; return 0.0 if one was there, else the seconds until one will be."""
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


@dataclass(frozen=True)
class KeyLimits:
    """One key's limits (None: unlimited)."""

    max_concurrent: int | None = None
    requests_per_minute: float | None = None
    burst: int | None = None

    @property
    def capacity(self) -> float:
        """The bucket's size: ``burst``, else ten seconds' worth of the rate (at least 1)."""
        assert self.requests_per_minute is not None
        return float(self.burst or max(1, math.ceil(self.requests_per_minute / 6)))


@dataclass
class _KeyState:
    in_flight: int = 0
    bucket: TokenBucket | None = None


@dataclass
class Limiter:
    """The per-key state of one app: ``acquire`` before the work, ``release`` after it."""

    clock: Callable[[], float] = time.monotonic
    _keys: dict[str, _KeyState] = field(default_factory=dict)

    def in_flight(self, key_id: str) -> int:
        state = self._keys.get(key_id)
        return state.in_flight if state else 0

    def acquire(self, key_id: str, limits: KeyLimits, *, busy_retry_s: float = 1.0) -> None:
        """Count one request of ``key_id`` in, or raise ``RateLimitedError`` naming the limit.
        ``busy_retry_s``: the Retry-After for the concurrency bound (the server's estimate of when
        a request of this key will be done)."""
        state = self._keys.setdefault(key_id, _KeyState())
        if limits.max_concurrent is not None and state.in_flight >= limits.max_concurrent:
            raise RateLimitedError(
                f"key {key_id!r} has {state.in_flight} requests in flight, its limit "
                f"(key_concurrency = {limits.max_concurrent}); wait for an answer before sending more",
                limit="key_concurrency", retry_after_s=busy_retry_s)
        if limits.requests_per_minute is not None:
            if state.bucket is None or state.bucket.rate != limits.requests_per_minute / 60:
                state.bucket = TokenBucket(limits.requests_per_minute / 60, limits.capacity,
                                           limits.capacity, self.clock())
            wait = state.bucket.take(self.clock())
            if wait > 0:
                raise RateLimitedError(
                    f"key {key_id!r} is over its limit (key_requests_per_minute = "
                    f"{limits.requests_per_minute:g}, burst {limits.capacity:g}); retry in {wait:.2f} s",
                    limit="key_requests_per_minute", retry_after_s=wait)
        state.in_flight += 1

    def release(self, key_id: str) -> None:
        self._keys[key_id].in_flight -= 1


__all__ = ["KeyLimits", "Limiter", "TokenBucket"]
