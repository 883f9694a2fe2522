"""``typed-decisions serve``: flags and ``TYPED_DECISIONS_*`` into settings, the app under uvicorn.

Loading the model happens in the background (``/healthz`` answers at once, ``/readyz`` when the
model has answered its self-test); SIGINT / SIGTERM refuse new requests and drain the ones in
flight before the process ends. Without API keys it listens on loopback only: a non-loopback
``--host`` without keys is refused at start unless ``--allow-anonymous`` (``settings.check_exposure``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import webbrowser
from pathlib import Path
from typing import Any

from ..compiler import LABEL_MODES, LabelMode
from ..debias import DEBIAS_MODES, Debias
from ..exports import ensure_export, locate
from ..wording import WORDINGS
from .app import create_app
from .service import Service
from .settings import ENV_PREFIX, ServerSettings, check_exposure, load_api_keys

__all__ = ["main", "serve_parser", "settings_from_args"]

log = logging.getLogger("typed_decisions.server")


def serve_parser() -> argparse.ArgumentParser:
    """The flags of ``typed-decisions serve`` (``ray_typed_decisions.cli`` adds its own to them)."""
    env = lambda name, default=None: os.environ.get(ENV_PREFIX + name) or default  # noqa: E731
    p = argparse.ArgumentParser(prog="typed-decisions serve", description=(
        "Serve POST /v1/systemone (typesafe-sdk compatible) and POST /v1/decisions (OpenAI's Decisions API) "
        f"for one exported model. Most options also read an environment variable ({ENV_PREFIX}MAX_BATCH for "
        "--max-batch, ...); which ones, and the exceptions: docs/deploy.md, 'Settings'. Flags win."))
    p.add_argument("--model", default=env("MODEL"), required=env("MODEL") is None,
                   help="exported model directory, or a catalogue name/alias ('default', 'tiny', "
                        "'NAME:int8') whose export is in the cache")
    p.add_argument("--export-if-missing", action="store_true",
                   help="export a catalogue model first if its export is not in the cache")
    p.add_argument("--open", action="store_true",
                   help="open the playground page (/playground) in a browser once the server listens")
    p.add_argument("--host", default=env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("PORT", "8000")))
    p.add_argument("--threads", type=int, default=env("THREADS"),
                   help="ONNX Runtime intra-op threads (default: the cores this process may use)")
    p.add_argument("--labels", choices=LABEL_MODES, default=env("LABELS", "auto"))
    p.add_argument("--debias", choices=DEBIAS_MODES, default=env("DEBIAS", "none"),
                   help="default for requests without a 'debias' field ('canonical': a choice's options in an order "
                        "fixed by the option set; 'rotate': averaged over rotations of that order)")
    p.add_argument("--wording", choices=list(WORDINGS), default=env("WORDING", "default"),
                   help="system prompt and question-block sentences by name (typed_decisions/wording.py)")
    p.add_argument("--max-prompt-tokens", type=int, default=env("MAX_PROMPT_TOKENS"),
                   help="refuse (422) prompts longer than this (default: the model's context)")
    p.add_argument("--api-keys-file", type=Path, default=None,
                   help="keys file of salted hashes, from 'typed-decisions keys add NAME' (also "
                        "TYPED_DECISIONS_API_KEYS_FILE)")
    p.add_argument("--allow-anonymous", action="store_true", default=None,
                   help="serve without keys on a non-loopback --host (refused otherwise; logged loudly)")
    p.add_argument("--key-concurrency", type=int, default=None, dest="key_max_concurrent",
                   help="most in-flight requests per key (default 16)")
    p.add_argument("--key-rpm", type=float, default=None, dest="key_requests_per_minute",
                   help="requests per minute per key, token bucket (default: no rate limit)")
    p.add_argument("--key-burst", type=int, default=None, help="token-bucket size per key (default: 10 s of --key-rpm)")
    p.add_argument("--body-timeout-s", type=float, default=None, help="most seconds to receive a body (408)")
    for name in ("max-json-depth", "max-questions", "max-options", "max-name-chars"):
        p.add_argument(f"--{name}", type=int, default=None, help="input bound (422), docs/deploy.md")
    p.add_argument("--preset", action="append", type=Path, default=None, dest="presets", metavar="FILE",
                   help="also serve this preset file under /v1/presets/{name} (repeatable; e.g. from typed-decisions fit)")
    p.add_argument("--alias", action="append", default=None, dest="aliases",
                   help="extra model name (repeatable; default: jev-latest)")
    p.add_argument("--max-batch", type=int, default=None)
    p.add_argument("--max-wait-ms", type=float, default=None)
    p.add_argument("--queue-size", type=int, default=None)
    p.add_argument("--max-body-bytes", type=int, default=None)
    p.add_argument("--audit-log", type=Path, default=None)
    p.add_argument("--log-level", default=env("LOG_LEVEL", "info"))
    return p


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """``ServerSettings`` from parsed ``serve_parser()`` flags over ``TYPED_DECISIONS_*``."""
    settings = ServerSettings.from_env(
        aliases=args.aliases, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
        queue_size=args.queue_size, max_body_bytes=args.max_body_bytes, audit_log=args.audit_log,
        allow_anonymous=args.allow_anonymous, key_max_concurrent=args.key_max_concurrent,
        key_requests_per_minute=args.key_requests_per_minute, key_burst=args.key_burst,
        body_timeout_s=args.body_timeout_s, max_json_depth=args.max_json_depth,
        max_questions=args.max_questions, max_options=args.max_options, max_name_chars=args.max_name_chars)
    if args.api_keys_file is not None:
        settings.api_keys.extend(load_api_keys(args.api_keys_file))
    settings.presets.extend(args.presets or [])
    return settings


def main(argv: list[str] | None = None) -> int:
    """``typed-decisions serve``: load the model, serve until SIGINT/SIGTERM, drain, exit.

    After draining, uvicorn re-raises the signal, so the process ends *by* SIGTERM (which systemd
    and Kubernetes count as a clean stop); a stop by other means returns 0."""
    import uvicorn

    from ..decider import Decider

    args = serve_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from_args(args)
    try:
        check_exposure(args.host, settings)
    except ValueError as e:
        print(f"typed-decisions serve: {e}", file=sys.stderr)
        return 2
    threads = int(args.threads) if args.threads else None
    max_tokens = int(args.max_prompt_tokens) if args.max_prompt_tokens else None
    labels: LabelMode = args.labels
    debias: Debias = args.debias
    wording: str = args.wording
    model = ensure_export(args.model) if args.export_if_missing else locate(args.model)
    app = create_app(lambda: Decider.load(model, threads=threads, label_mode=labels, debias=debias, wording=wording,
                                          max_tokens=max_tokens), settings=settings)
    service: Service = app.state.service

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:  # new requests → 503 at once
            service.begin_shutdown()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                            timeout_graceful_shutdown=int(settings.shutdown_timeout_s))
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    url = f"http://{host}:{args.port}/playground"
    log.info("playground: %s (the model loads in the background; the page says when it is ready)", url)
    if args.open:
        threading.Timer(1.0, webbrowser.open, (url,)).start()
    Server(config).run()
    return 0
