"""Settings of the HTTP server: one pydantic model, read from flags and ``TYPED_DECISIONS_*``.

``app.create_app`` builds the app from a ``ServerSettings``; ``main.main()`` fills it from command-line
flags over environment variables (flags win). API keys come from a keys file of salted hashes
(``keys.py``; ``typed-decisions keys add NAME``) and/or ``TYPED_DECISIONS_API_KEYS``
(comma-separated); the settings hold only ids, salts and digests, never a key.

``check_exposure`` is the secure default: a server that would listen beyond loopback without
keys refuses to start unless ``allow_anonymous`` says the operator means it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .keys import ApiKey, env_keys, load_api_keys

ENV_PREFIX = "TYPED_DECISIONS_"


class ServerSettings(BaseModel):
    """Everything the app needs besides the model. ``from_env()`` reads ``TYPED_DECISIONS_*``."""

    model_config = ConfigDict(extra="forbid")

    api_keys: list[ApiKey] = Field(default_factory=list, description=(
        "Hashed keys (keys.py). A mapping {key: id} is accepted and hashed at once. Empty: "
        "anonymous access, which only loopback gets unless allow_anonymous."))
    allow_anonymous: bool = Field(False, description=(
        "Serve without keys on a non-loopback address (logged loudly, shown on GET /v1/models)."))
    key_max_concurrent: int | None = Field(16, ge=1, description=(
        "Most in-flight model requests per key (anonymous callers share one); beyond it 429."))
    key_requests_per_minute: float | None = Field(None, gt=0, description=(
        "Token-bucket rate per key (None: no rate limit); beyond it 429 with Retry-After."))
    key_burst: int | None = Field(None, ge=1, description=(
        "Token-bucket capacity per key (default: 10 seconds' worth of the rate, at least 1)."))
    aliases: list[str] = Field(default_factory=lambda: ["jev-latest"], description=(
        "Extra names the loaded model answers to (GET /v1/models lists them)."))
    description: str | None = Field(None, description="Model description for GET /v1/models.")
    release_date: dt.date | None = Field(None, description="YYYY-MM-DD; default: the export's date.")
    max_batch: int = Field(8, ge=1, description="Most requests per engine call.")
    max_wait_ms: float = Field(5.0, ge=0, description="How long a request waits for batch-mates.")
    queue_size: int = Field(64, ge=1, description="Most requests waiting; beyond it 429.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Body limit, after decompression (413).")
    audit_log: Path | None = Field(None, description="JSON-lines audit file (no state text, no keys).")
    shutdown_timeout_s: float = Field(30.0, ge=0, description="How long shutdown waits for in-flight work.")
    body_timeout_s: float = Field(30.0, gt=0, description="Most seconds to receive a body (slow clients: 408).")
    max_json_depth: int = Field(32, ge=2, description="Deepest nesting of arrays/objects in a body (422).")
    max_questions: int = Field(64, ge=1, description="Most questions per request (422).")
    max_options: int = Field(1024, ge=2, description="Most options of a choice / levels of a score (422): 1,024 covers real taxonomies; the engine bounds the KV a call may hold on its own.")
    max_name_chars: int = Field(256, ge=1, description="Longest question or option name (422).")
    presets: list[Path] = Field(default_factory=list, description=(
        "The operator's preset files (JSON; e.g. written by typed-decisions fit), served under "
        "/v1/presets/{name} beside the shipped ones, loaded at start (a bad file stops the start)."))

    @field_validator("api_keys", mode="before")
    @classmethod
    def _hash_plain(cls, value: Any) -> Any:
        """``{"sk-...": "alice"}`` (tests, embedding) → hashed records; the keys are not kept."""
        if isinstance(value, Mapping):
            return [ApiKey.hash(key, id) for key, id in value.items()]
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ServerSettings:
        """Settings from ``TYPED_DECISIONS_*`` variables; ``overrides`` (not None) win."""
        env = os.environ if env is None else env
        get = lambda name: (env.get(ENV_PREFIX + name) or "").strip() or None  # noqa: E731
        values: dict[str, Any] = {}
        keys: list[ApiKey] = []
        if get("API_KEYS_FILE"):
            keys += load_api_keys(Path(get("API_KEYS_FILE")))
        keys += env_keys(get("API_KEYS") or "")
        if keys:
            values["api_keys"] = keys
        if (get("ALLOW_ANONYMOUS") or "").lower() in ("1", "true", "yes"):
            values["allow_anonymous"] = True
        if get("ALIASES") is not None:
            values["aliases"] = [a.strip() for a in get("ALIASES").split(",") if a.strip()]
        for name in ("description", "release_date", "max_batch", "max_wait_ms", "queue_size",
                     "max_body_bytes", "audit_log", "shutdown_timeout_s", "key_max_concurrent",
                     "key_requests_per_minute", "key_burst", "body_timeout_s", "max_json_depth",
                     "max_questions", "max_options", "max_name_chars"):
            if get(name.upper()) is not None:
                values[name] = get(name.upper())
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is reachable from this machine only.

    >>> [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "::", "10.0.0.5")]
    [True, True, True, False, False, False]
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


ANONYMOUS_WARNING = ("ANONYMOUS ACCESS: no API keys are configured and --allow-anonymous is set, "
                     "so anyone who can reach this server may use it")


def check_exposure(host: str, settings: ServerSettings) -> None:
    """Refuse (``ValueError``, naming the fixes) to serve anonymously beyond loopback."""
    if settings.api_keys or settings.allow_anonymous or is_loopback(host):
        return
    raise ValueError(
        f"refusing to listen on {host!r} without API keys: anyone who can reach it could use the "
        "model. Issue a key (typed-decisions keys add NAME; then --api-keys-file api-keys), or "
        f"bind to 127.0.0.1, or pass --allow-anonymous ({ENV_PREFIX}ALLOW_ANONYMOUS=1) if you mean it")


__all__ = ["ANONYMOUS_WARNING", "ENV_PREFIX", "ServerSettings", "check_exposure", "is_loopback", "load_api_keys"]
