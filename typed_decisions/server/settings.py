"""Settings of the HTTP server: one pydantic model, read from flags and ``TYPED_DECISIONS_*``.

``app.create_app`` builds the app from a ``ServerSettings``; ``main.main()`` fills it from command-line
flags over environment variables (flags win). API keys come from ``TYPED_DECISIONS_API_KEYS``
(comma-separated) and/or a keys file; each key has an id, and only the id is ever logged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ENV_PREFIX = "TYPED_DECISIONS_"


class ServerSettings(BaseModel):
    """Everything the app needs besides the model. ``from_env()`` reads ``TYPED_DECISIONS_*``."""

    model_config = ConfigDict(extra="forbid")

    api_keys: dict[str, str] = Field(default_factory=dict, description=(
        "key → key id (the id, never the key, goes to logs). Empty: any key is accepted."))
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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ServerSettings:
        """Settings from ``TYPED_DECISIONS_*`` variables; ``overrides`` (not None) win."""
        env = os.environ if env is None else env
        get = lambda name: (env.get(ENV_PREFIX + name) or "").strip() or None  # noqa: E731
        values: dict[str, Any] = {}
        keys: dict[str, str] = {}
        if get("API_KEYS_FILE"):
            keys.update(load_api_keys(Path(get("API_KEYS_FILE"))))
        for key in (get("API_KEYS") or "").split(","):
            if key.strip():
                keys[key.strip()] = key_id(key.strip())
        if keys:
            values["api_keys"] = keys
        if get("ALIASES") is not None:
            values["aliases"] = [a.strip() for a in get("ALIASES").split(",") if a.strip()]
        for name in ("description", "release_date", "max_batch", "max_wait_ms", "queue_size",
                     "max_body_bytes", "audit_log", "shutdown_timeout_s"):
            if get(name.upper()) is not None:
                values[name] = get(name.upper())
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)


def key_id(key: str) -> str:
    """A loggable id for an API key: ``key-`` + 8 hex digits of its sha256."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


def load_api_keys(path: Path) -> dict[str, str]:
    """Keys file: one ``KEY`` or ``ID KEY`` per line; blank lines and ``#`` comments ignored.

    >>> import tempfile, pathlib; p = pathlib.Path(tempfile.mkdtemp()) / "keys"
    >>> _ = p.write_text("# team keys\\nalice sk-1\\nsk-2\\n"); load_api_keys(p)
    {'sk-1': 'alice', 'sk-2': 'key-bbaae8c9'}
    """
    keys: dict[str, str] = {}
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 1:
            keys[fields[0]] = key_id(fields[0])
        elif len(fields) == 2:
            keys[fields[1]] = fields[0]
        elif fields:
            raise ValueError(f"{path}: a line must be 'KEY' or 'ID KEY', got {len(fields)} fields")
    return keys


__all__ = ["ENV_PREFIX", "ServerSettings", "key_id", "load_api_keys"]
