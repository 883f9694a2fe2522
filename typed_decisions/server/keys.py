"""API keys that leak nothing: a file of salted hashes, compared in constant time.

A key is issued once by ``typed-decisions keys add NAME``: 32 random bytes (``td-`` + base64url),
printed once and never stored. The keys file keeps one line per key::

    # NAME   HASH                                        [concurrency=N] [rpm=N] [burst=N]
    alice    sha256$<salt, base64url>$<digest, base64url>  rpm=600

``digest = sha256(salt ‖ key)`` with a fresh 16-byte salt per key. The hash is fast on purpose:
issued keys carry 256 bits of entropy, so a slow KDF (scrypt, PBKDF2) adds nothing against a
stolen file, and it would hand every anonymous caller a way to spend the server's CPU (each
``Authorization`` header would cost a KDF run per key). A presented key is hashed with every
record's salt and compared with ``hmac.compare_digest``; all records are tried, whichever matches.

``NAME`` is the key id: the only thing logs, metrics and the audit log ever say about a key.
The optional fields override the server's per-key limits (``limits.py``) for that key.

Older files with plaintext lines (``KEY`` or ``ID KEY``) still load, hashed in memory at once,
with a warning naming the lines to replace; so do keys from ``TYPED_DECISIONS_API_KEYS``
(ids ``env-1``, ``env-2``, ...: positions, never anything derived from the key).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("typed_decisions.server")

SCHEME = "sha256"
KEY_PREFIX = "td-"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_LIMIT_FIELDS = {"concurrency": "max_concurrent", "rpm": "requests_per_minute", "burst": "burst"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ApiKey(BaseModel):
    """One key as the server holds it: its id, salt and digest (never the key), and its limits
    (None: the server's defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=NAME_PATTERN.pattern, description="logged, counted and audited; never the key")
    salt: str = Field(description="base64url of 16 random bytes")
    digest: str = Field(description="base64url of sha256(salt ‖ key)")
    max_concurrent: int | None = Field(None, ge=1, description="this key's in-flight requests")
    requests_per_minute: float | None = Field(None, gt=0, description="this key's token-bucket rate")
    burst: int | None = Field(None, ge=1, description="this key's token-bucket capacity")

    @classmethod
    def hash(cls, key: str, id: str, **limits: float | int | None) -> ApiKey:
        """A record for ``key`` with a fresh salt.

        >>> k = ApiKey.hash("td-secret", "alice"); k.matches("td-secret"), k.matches("td-other")
        (True, False)
        """
        salt = secrets.token_bytes(16)
        return cls(id=id, salt=_b64(salt), digest=_b64(hashlib.sha256(salt + key.encode()).digest()),
                   **limits)

    def matches(self, key: str) -> bool:
        """Constant-time comparison of ``key``'s digest with this record's."""
        candidate = hashlib.sha256(_unb64(self.salt) + key.encode("utf-8", "surrogatepass")).digest()
        return hmac.compare_digest(candidate, _unb64(self.digest))

    def line(self) -> str:
        """This record as a keys-file line."""
        limits = [f"{short}={getattr(self, attr):g}" for short, attr in _LIMIT_FIELDS.items()
                  if getattr(self, attr) is not None]
        return "  ".join([self.id, f"{SCHEME}${self.salt}${self.digest}", *limits])


def find_key(records: Sequence[ApiKey], key: str) -> ApiKey | None:
    """The record ``key`` belongs to, or None. Every record is compared (no early exit)."""
    found = None
    for record in records:
        if record.matches(key) and found is None:
            found = record
    return found


def generate_key() -> str:
    """A new key: ``td-`` + 43 base64url characters (32 random bytes)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def parse_line(line: str, path: Path, n: int) -> tuple[ApiKey | None, bool]:
    """Line ``n`` of a keys file → (record, or None for a blank or comment line; whether it held
    a plaintext key)."""
    where = f"{path}:{n}"
    fields = line.split("#", 1)[0].split()
    if not fields:
        return None, False
    if len(fields) >= 2 and fields[1].startswith(SCHEME + "$"):
        name, hashed, *extra = fields
        _, salt, digest = (hashed.split("$") + ["", ""])[:3]
        limits: dict[str, float] = {}
        for item in extra:
            short, _, value = item.partition("=")
            if short not in _LIMIT_FIELDS or not value:
                raise ValueError(f"{where}: unknown field {item!r}; allowed: "
                                 f"{', '.join(f + '=N' for f in _LIMIT_FIELDS)}")
            try:
                limits[_LIMIT_FIELDS[short]] = float(value)
            except ValueError:
                raise ValueError(f"{where}: {short} must be a number, got {value!r}") from None
        return ApiKey(id=name, salt=salt, digest=digest, **limits), False
    if len(fields) == 1:  # legacy plaintext: KEY
        return ApiKey.hash(fields[0], f"line-{n}"), True
    if len(fields) == 2:  # legacy plaintext: ID KEY
        return ApiKey.hash(fields[1], fields[0]), True
    raise ValueError(f"{where}: a line must be 'NAME {SCHEME}$SALT$DIGEST [limits]' "
                     f"(typed-decisions keys add NAME), got {len(fields)} fields")


def load_api_keys(path: Path) -> list[ApiKey]:
    """The records of a keys file. Plaintext lines are hashed at once and logged as a warning.

    >>> import tempfile, pathlib; p = pathlib.Path(tempfile.mkdtemp()) / "keys"
    >>> _ = p.write_text("# team keys\\nalice sk-1\\nsk-2\\n"); [k.id for k in load_api_keys(p)]
    ['alice', 'line-3']
    """
    records: list[ApiKey] = []
    plaintext: list[int] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        record, plain = parse_line(line, path, n)
        if record is not None:
            records.append(record)
        if plain:
            plaintext.append(n)
    ids = [r.id for r in records]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{path}: key ids must be unique; repeated: {', '.join(duplicates)}")
    if plaintext:
        log.warning("%s holds plaintext keys (lines %s): replace each with a hashed line "
                    "('typed-decisions keys add NAME' issues one)", path, ", ".join(map(str, plaintext)))
    return records


def env_keys(value: str) -> list[ApiKey]:
    """``TYPED_DECISIONS_API_KEYS`` (comma-separated keys) → records ``env-1``, ``env-2``, ..."""
    keys = [k.strip() for k in value.split(",") if k.strip()]
    return [ApiKey.hash(k, f"env-{i}") for i, k in enumerate(keys, 1)]


def add_key(path: Path, name: str, **limits: float | int | None) -> str:
    """Issue a key named ``name``: append its hashed line to ``path`` (created 0600), return it."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"key name {name!r}: use 1-64 of A-Z a-z 0-9 . _ - (it appears in logs and "
                         "metrics), starting with a letter or digit")
    existing = load_api_keys(path) if path.exists() else []
    if any(r.id == name for r in existing):
        raise ValueError(f"{path} already has a key named {name!r}; remove it first or pick another name")
    key = generate_key()
    record = ApiKey.hash(key, name, **limits)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if f.tell() == 0:
            f.write("# typed-decisions API keys: NAME  sha256$SALT$DIGEST  [concurrency=N] [rpm=N] [burst=N]\n")
        f.write(record.line() + "\n")
    return key


def remove_key(path: Path, name: str) -> None:
    """Drop the line of key ``name`` from ``path`` (other lines, comments included, stay)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if ln.split("#", 1)[0].split()[:1] != [name]]
    if len(kept) == len(lines):
        raise ValueError(f"{path} has no key named {name!r}")
    path.write_text("".join(kept), encoding="utf-8")


def _default_file() -> Path:
    return Path(os.environ.get("TYPED_DECISIONS_API_KEYS_FILE") or "api-keys")


def main_keys(argv: Iterable[str]) -> int:
    """``typed-decisions keys add NAME | list | remove NAME [--file F]``."""
    p = argparse.ArgumentParser(prog="typed-decisions keys", description=(
        "Manage a server's API keys file (salted hashes; a key is shown once, when added). "
        "Default file: $TYPED_DECISIONS_API_KEYS_FILE, else ./api-keys."))
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="issue a key: print it once, store only its hash")
    add.add_argument("name", help="the key id (logs, metrics and the audit log show only this)")
    add.add_argument("--concurrency", type=int, default=None, help="this key's in-flight limit")
    add.add_argument("--rpm", type=float, default=None, help="this key's requests per minute")
    add.add_argument("--burst", type=int, default=None, help="this key's burst (token-bucket size)")
    sub.add_parser("list", help="the key ids and their limits (no hashes)")
    rm = sub.add_parser("remove", help="revoke a key (restart the server to apply)")
    rm.add_argument("name")
    for s in sub.choices.values():
        s.add_argument("--file", type=Path, default=None, help="the keys file")
    args = p.parse_args(list(argv))
    path = args.file or _default_file()
    try:
        if args.command == "add":
            key = add_key(path, args.name, max_concurrent=args.concurrency,
                          requests_per_minute=args.rpm, burst=args.burst)
            print(key)
            print(f"key {args.name!r} added to {path} (only its hash is stored: this is the one time "
                  "the key is shown; restart the server to apply)", file=sys.stderr)
        elif args.command == "list":
            for r in load_api_keys(path):
                limits = r.line().split("  ")[2:]
                print("  ".join([r.id, *limits]))
        else:
            remove_key(path, args.name)
            print(f"key {args.name!r} removed from {path} (restart the server to apply)", file=sys.stderr)
    except (ValueError, OSError) as e:
        print(f"typed-decisions keys: {e}", file=sys.stderr)
        return 2
    return 0


__all__ = ["ApiKey", "add_key", "env_keys", "find_key", "generate_key", "load_api_keys",
           "main_keys", "remove_key"]
