"""HTTP server (typed_decisions.server): status codes, bodies, batching, metrics, the real SDK.

Two kinds of test, as the module's two dependencies suggest:
- fast unit tests against the shared ``td_fakes.FakeDecider`` (same interface as ``Decider``:
  ``name``, ``run_many``, ``engine.stats``), for every status code and header the hosted API defines;
- integration tests with the tiny real export (``tiny_decider``) and with typesafe-sdk 0.7.5 (sync
  and async clients) against a live uvicorn on 127.0.0.1; micro-batched probabilities are compared
  with one-by-one ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from td_optional import require  # noqa: E402
from td_threads import THREADS

require("fastapi", "pip install 'typed-decisions-runtime[server]'")
zstandard = require("zstandard", "pip install 'typed-decisions-runtime[server]'")

import td_fakes  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from typed_decisions.errors import AuthenticationError  # noqa: E402
from typed_decisions.presets import load_preset  # noqa: E402
from typed_decisions.schema import json_sha256  # noqa: E402
from typed_decisions.server import ServerSettings, create_app, load_api_keys  # noqa: E402
from typed_decisions.server.batching import Unbatched, answer_each  # noqa: E402

RID = "x-typesafe-request-id"

REQUEST = {
    "model": "jev-latest",
    "state": "I was charged twice for my subscription this month. Please refund one payment.",
    "questions": {
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {"billing": "Payments, refunds, invoices", "tech": "Bugs, outages"}},
        "urgent": {"type": "noul", "instructions": "Is it urgent?"},
        "severity": {"type": "score", "instructions": "How severe is it?",
                     "criteria": ["low", "medium", "high"]},
    },
}


def _request(state: str = REQUEST["state"], **changes: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(REQUEST)), "state": state, **changes}


# --------------------------------------------------------------------------- the fake decider


class FakeDecider(td_fakes.FakeDecider):
    """The shared fake (tests/td_fakes.py) under the name these tests address: ``fake-model``."""

    def __init__(self, **kw: Any):
        super().__init__(name="fake-model", **kw)


@contextlib.contextmanager
def _client(decider: Any = None, **settings: Any) -> Iterator[TestClient]:
    app = create_app(decider if decider is not None else FakeDecider(),
                     settings=ServerSettings(**settings))
    with TestClient(app) as client:
        yield client


def _detail(response: httpx.Response) -> list[dict[str, Any]]:
    """A 422's items: FastAPI's list, which the spec (errors.validation-shape) and typesafe-sdk read."""
    assert response.status_code == 422, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"detail"} and isinstance(body["detail"], list) and body["detail"], body
    for item in body["detail"]:
        assert set(item) == {"loc", "msg", "type"} and isinstance(item["msg"], str), item
        assert item["loc"][:1] == ["body"], item
    assert "Traceback" not in response.text
    return body["detail"]


def _error(response: httpx.Response, error_type: str) -> str:
    """Any other error's message: ``{"detail": {"error_type", "message"}}`` (the spec's
    errors.shape), with exactly the ``error_type`` expected."""
    assert response.status_code != 422 and response.status_code >= 400, (response.status_code, response.text)
    body = response.json()
    assert body == {"detail": {"error_type": error_type, "message": body["detail"]["message"]}}, body
    assert isinstance(body["detail"]["message"], str) and body["detail"]["message"], body
    assert "Traceback" not in response.text
    return body["detail"]["message"]


# --------------------------------------------------------------------------- plain routes


def test_health_ready_models_and_request_ids():
    with _client(aliases=["jev-latest", "house"], release_date="2026-01-31") as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["model"] == "fake-model"
        models = c.get("/v1/models", headers={"Authorization": "Bearer anything"}).json()["models"]
        assert [m["name"] for m in models] == ["fake-model", "jev-latest", "house"]
        assert all(m["release_date"] == "2026-01-31" and m["description"] for m in models)
        ids = {c.get(path).headers[RID] for path in ("/healthz", "/readyz", "/metrics", "/nope")}
        assert len(ids) == 4 and all(i.startswith("req_") for i in ids)
        missing = c.get("/nope")
        assert missing.status_code == 404 and "GET /nope" in _error(missing, "not_found_error")
        wrong = c.get("/v1/systemone")
        assert wrong.status_code == 405 and _error(wrong, "method_not_allowed_error")


def test_default_release_date_is_a_date_and_default_alias_is_jev_latest():
    with _client() as c:
        (first, alias) = c.get("/v1/models").json()["models"]
        assert alias["name"] == "jev-latest"
        time.strptime(first["release_date"], "%Y-%m-%d")


def test_answers_are_strictly_typed():
    with _client() as c:
        r = c.post("/v1/systemone", json=REQUEST, headers={"Authorization": "Bearer k"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert r.headers[RID].startswith("req_")
        assert body["model"] == "fake-model"
        assert type(body["usage"]["input_tokens"]) is int and body["usage"]["output_tokens"] == 0
        assert {n: a["type"] for n, a in body["answers"].items()} == {
            "team": "choice", "urgent": "noul", "severity": "score"}
        assert set(body["answers"]["severity"]["legend"]) == {"0", "1", "2"}
        assert "calibration" not in json.dumps(body)


# --------------------------------------------------------------------------- auth


def test_auth_off_accepts_any_key_and_logs_it(caplog):
    with caplog.at_level("WARNING", logger="typed_decisions.server"), _client() as c:
        assert c.post("/v1/systemone", json=REQUEST).status_code == 200
        assert c.post("/v1/systemone", json=REQUEST, headers={"Authorization": "Bearer x"}).status_code == 200
    assert "any bearer key is accepted" in caplog.text


def test_auth_on(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("alice sk-alice\nsk-bob  # no id\n")
    with _client(api_keys=load_api_keys(keys)) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic sk-alice"}):
            r = c.post("/v1/systemone", json=REQUEST, headers=headers)
            assert r.status_code == 401 and r.headers[RID] and r.headers["www-authenticate"] == "Bearer"
            assert "API key" in _error(r, "authentication_error")
        assert c.get("/v1/models").status_code == 401
        for key in ("sk-alice", "sk-bob"):
            assert c.post("/v1/systemone", json=REQUEST,
                          headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert c.get("/healthz").status_code == 200  # probes need no key


def test_settings_from_env(tmp_path):
    keys = tmp_path / "k"
    keys.write_text("ops sk-1\n")
    s = ServerSettings.from_env({"TYPED_DECISIONS_API_KEYS": "sk-2, sk-3",
                                 "TYPED_DECISIONS_API_KEYS_FILE": str(keys),
                                 "TYPED_DECISIONS_ALIASES": "jev-latest,prod",
                                 "TYPED_DECISIONS_MAX_BATCH": "4", "TYPED_DECISIONS_MAX_WAIT_MS": "2.5",
                                 "TYPED_DECISIONS_QUEUE_SIZE": "9"}, max_batch=16)
    # the settings hold ids, salts and digests, never a key (ids of env keys: positions)
    assert [k.id for k in s.api_keys] == ["ops", "env-1", "env-2"]
    assert [k.id for k in s.api_keys if k.matches("sk-3")] == ["env-2"]
    assert not any(k in s.model_dump_json() for k in ("sk-1", "sk-2", "sk-3"))
    assert (s.aliases, s.max_batch, s.max_wait_ms, s.queue_size) == (["jev-latest", "prod"], 16, 2.5, 9)


# --------------------------------------------------------------------------- bodies


def test_zstd_and_gzip_bodies():
    raw = json.dumps(_request("x" * 1500)).encode()
    with _client() as c:
        plain = c.post("/v1/systemone", content=raw, headers={"content-type": "application/json"}).json()
        for enc, data in (("zstd", zstandard.ZstdCompressor().compress(raw)),
                          ("gzip", gzip.compress(raw)), ("identity", raw)):
            r = c.post("/v1/systemone", content=data,
                       headers={"content-type": "application/json", "content-encoding": enc})
            assert r.status_code == 200, (enc, r.text)
            assert r.json() == plain


def test_corrupt_unknown_and_oversized_bodies():
    raw = json.dumps(REQUEST).encode()
    h = {"content-type": "application/json"}
    with _client(max_body_bytes=4096) as c:
        for enc, data in (("zstd", b"not zstd at all"), ("zstd", zstandard.ZstdCompressor().compress(raw)[:-4]),
                          ("gzip", gzip.compress(raw)[:-8]), ("gzip", b"\x1f\x8b garbage")):
            r = c.post("/v1/systemone", content=data, headers={**h, "content-encoding": enc})
            assert r.status_code == 400, (enc, r.text)
            assert enc in _error(r, "bad_body_error")
        r = c.post("/v1/systemone", content=raw, headers={**h, "content-encoding": "br"})
        assert r.status_code == 415 and "'br'" in _error(r, "unsupported_encoding_error")
        # A zstd bomb: 64 MiB of zeros in a few KB hits the 4 KiB limit, not memory.
        bomb = zstandard.ZstdCompressor(level=19).compress(b" " * (64 << 20))
        assert len(bomb) < 4096
        r = c.post("/v1/systemone", content=bomb, headers={**h, "content-encoding": "zstd"})
        assert r.status_code == 413 and "4096 bytes" in _error(r, "body_too_large_error")
        gz_bomb = gzip.compress(b" " * (16 << 20))
        r = c.post("/v1/systemone", content=gz_bomb[:4000], headers={**h, "content-encoding": "gzip"})
        assert r.status_code in (400, 413)
        big = json.dumps(_request("y" * 5000)).encode()
        r = c.post("/v1/systemone", content=big, headers=h)
        assert r.status_code == 413 and r.headers[RID]


def test_the_spec_s_request_shape_rules():
    """Conformance fixes (#33): no questions is a 422 naming 'questions'; a 'box' question gets
    the text-only model's message, as 'assets' does; x_* extension fields pass and change nothing."""
    with _client() as c:
        (d,) = _detail(c.post("/v1/systemone", json=_request(questions={})))
        assert d["loc"] == ["body", "questions"] and "at least one question" in d["msg"]
        box = _request(questions={"where": {"type": "box", "instructions": "the invoice total"}})
        (d,) = _detail(c.post("/v1/systemone", json=box))
        assert d["loc"] == ["body", "questions", "where"] and "text-only model" in d["msg"]
        plain = c.post("/v1/systemone", json=_request())
        extended = c.post("/v1/systemone", json={**_request(), "x_trace_id": "abc", "x_client": {"v": 1}})
        assert plain.status_code == extended.status_code == 200
        assert extended.json()["answers"] == plain.json()["answers"]


def test_invalid_json_and_validation_errors_are_422_with_field_paths():
    with _client() as c:
        r = c.post("/v1/systemone", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and _detail(r)[0]["type"] == "json_invalid"
        bad = _request()
        bad["questions"]["team"]["criteria"] = {}
        (d,) = _detail(c.post("/v1/systemone", json=bad))
        assert d["loc"] == ["body", "questions", "team", "criteria"] and "at least one option" in d["msg"]
        r = c.post("/v1/systemone", json={**REQUEST, "temperature": 0.2})
        assert r.status_code == 422 and "sampling parameter" in _detail(r)[0]["msg"]
        r = c.post("/v1/systemone", json={"model": "jev-latest", "questions": {}})
        assert r.status_code == 422 and ["body", "state"] in [d["loc"] for d in _detail(r)]
        r = c.post("/v1/systemone", json=[1, 2])
        assert r.status_code == 422
        r = c.post("/v1/systemone", json=_request("z" * 2500))
        assert r.status_code == 422 and _detail(r)[0]["type"] == "context_too_long"


def test_multipart_images_get_422_not_500():
    with _client() as c:
        files = {"request": (None, json.dumps({**REQUEST, "assets": {"img": {"type": "image", "part": "asset-0"}}}),
                             "application/json"),
                 "asset-0": ("asset-0", b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png")}
        r = c.post("/v1/systemone", files=files)
        assert r.status_code == 422
        (d,) = _detail(r)
        assert d["loc"] == ["body", "assets"] and "multimodal" in d["msg"]
        r = c.post("/v1/systemone", json={**REQUEST, "assets": {"img": {"type": "image", "data_base64": "AA=="}}})
        assert r.status_code == 422 and "multimodal" in r.text


def test_unknown_model_is_404_with_available_names():
    with _client() as c:
        r = c.post("/v1/systemone", json={**REQUEST, "model": "gpt-9"})
        assert r.status_code == 404
        message = _error(r, "model_not_found_error")
        assert "'gpt-9'" in message and "fake-model" in message and "jev-latest" in message
        assert c.post("/v1/systemone", json={**REQUEST, "model": "fake-model"}).status_code == 200


def test_unexpected_engine_failure_is_500_without_a_trace():
    fake = FakeDecider()
    with _client(fake) as c:
        fake.fail_with = RuntimeError("secret internal detail")
        r = c.post("/v1/systemone", json=REQUEST)
        assert r.status_code == 500 and r.headers[RID]
        assert "secret" not in r.text and "server log" in _error(r, "internal_error")


def test_every_refusal_has_its_error_type_on_the_wire_and_in_the_docs():
    """{"detail": {"error_type", "message"}} for every refusal the server makes (#33; the spec's
    errors.shape); error_type is the class in snake case, which RemoteBackend maps back, and
    docs/deploy.md's status table names each one."""
    from typed_decisions.errors import REFUSALS, RateLimitedError, http_status
    from typed_decisions.server.app import ERROR_TYPES, error_response

    docs = (Path(__file__).resolve().parents[1] / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert set(ERROR_TYPES) == set(REFUSALS)
    for cls, kind in ERROR_TYPES.items():
        extra = {"limit": "queue_size"} if cls is RateLimitedError else {}
        error = cls("why, and what to change", **extra)
        r = error_response(error)
        assert r.status_code == http_status(error) != 422
        assert json.loads(r.body) == {"detail": {"error_type": kind, "message": "why, and what to change"}}
        assert f"`{kind}`" in docs, kind
    assert ERROR_TYPES[AuthenticationError] == "authentication_error"  # the name the spec requires


# --------------------------------------------------------------------------- concurrency


async def _live(app, scenario):
    """Run ``scenario(client)`` against the app (lifespan included) on this event loop."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await scenario(client)


def test_micro_batches_answer_as_one_by_one():
    fake = FakeDecider(delay=0.05)
    app = create_app(fake, settings=ServerSettings(max_batch=8, max_wait_ms=20))
    requests = [_request(f"state number {i}") for i in range(12)]

    async def scenario(client):
        return await asyncio.gather(*(client.post("/v1/systemone", json=r) for r in requests))

    responses = asyncio.run(_live(app, scenario))
    assert all(r.status_code == 200 for r in responses)
    assert max(fake.calls) > 1, fake.calls  # they were batched
    sequential = [FakeDecider().run(r).model_dump(mode="json") for r in requests]
    assert [r.json() for r in responses] == sequential


def test_dispatch_hands_each_request_on_at_once_and_concurrently():
    """``create_app(dispatch=...)`` (a decider that batches downstream, Ray Serve's @serve.batch):
    no micro-batcher in front, every request reaches ``dispatch`` alone and while the others are
    still waiting (they all wait on one barrier, so a serial path could not answer any of them),
    and each answer is the decider's own one-by-one answer."""
    fake = FakeDecider()
    requests = [_request(f"state number {i}") for i in range(6)]
    seen: list[str] = []
    everyone = asyncio.Event()

    async def dispatch(job):
        seen.append(job.request.state)
        if len(seen) == 1 + len(requests):  # the self-test, then every request
            everyone.set()
        if job.request.state != "The server is starting.":
            await asyncio.wait_for(everyone.wait(), 30)
        return fake.run_many([job.request])[0]

    app = create_app(fake, settings=ServerSettings(max_batch=8, max_wait_ms=20), dispatch=dispatch)

    async def scenario(client):
        return await asyncio.gather(*(client.post("/v1/systemone", json=r) for r in requests))

    responses = asyncio.run(_live(app, scenario))
    assert [r.status_code for r in responses] == [200] * len(requests), [r.text for r in responses]
    assert fake.calls == [1] * (1 + len(requests))  # one request per decider call, none batched here
    assert [r.json() for r in responses] == [FakeDecider().run(r).model_dump(mode="json") for r in requests]


def test_unbatched_refuses_beyond_its_queue_size_and_passes_errors_on():
    from typed_decisions.errors import RateLimitedError

    release = asyncio.Event()

    async def run_one(x: int) -> float:
        await release.wait()
        return 1 / x

    async def scenario():
        u = Unbatched(run_one, queue_size=2)
        a, b = asyncio.ensure_future(u.submit(1)), asyncio.ensure_future(u.submit(0))
        await asyncio.sleep(0)
        assert u.depth == 2
        with pytest.raises(RateLimitedError) as e:
            await u.submit(4)
        release.set()
        assert await a == 1.0
        with pytest.raises(ZeroDivisionError):
            await b
        assert u.depth == 0
        return e.value

    refused = asyncio.run(scenario())
    assert refused.limit == "queue_size" and "queue_size = 2" in str(refused)


def test_a_bad_request_does_not_fail_its_batch_mates():
    fake = FakeDecider()
    app = create_app(fake, settings=ServerSettings(max_batch=8, max_wait_ms=50))
    bad = _request()
    bad["questions"]["team"]["criteria"]["<boundary>"] = None

    async def scenario(client):
        return await asyncio.gather(*(client.post("/v1/systemone", json=r)
                                      for r in (_request("a"), bad, _request("b"))))

    ok1, boundary, ok2 = asyncio.run(_live(app, scenario))
    assert ok1.status_code == ok2.status_code == 200
    assert boundary.status_code == 422
    (d,) = _detail(boundary)
    assert d["loc"] == ["body", "questions", "team", "criteria", "<boundary>"]
    assert d["type"] == "tokenizer_boundary"


def test_answer_each_falls_back_to_one_by_one():
    assert answer_each(lambda xs: [10 // x for x in xs], [5, 2]) == [2, 5]
    out = answer_each(lambda xs: [10 // x for x in xs], [5, 0, 2])
    assert out[0] == 2 and isinstance(out[1], ZeroDivisionError) and out[2] == 5


def test_queue_full_is_429_with_retry_after():
    fake = FakeDecider()
    app = create_app(fake, settings=ServerSettings(max_batch=1, max_wait_ms=0, queue_size=2))

    async def scenario(client):
        fake.gate.clear()                                           # after the start-up self-test
        fake.entered.clear()
        first = asyncio.create_task(client.post("/v1/systemone", json=_request("held")))
        await asyncio.to_thread(fake.entered.wait, 5)              # the engine holds request 1
        queued = [asyncio.create_task(client.post("/v1/systemone", json=_request(f"q{i}")))
                  for i in range(2)]
        await asyncio.sleep(0.05)
        refused = await client.post("/v1/systemone", json=_request("one too many"))
        metrics = (await client.get("/metrics")).text
        fake.gate.set()
        return refused, metrics, await asyncio.gather(first, *queued)

    refused, metrics, done = asyncio.run(_live(app, scenario))
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1 and int(refused.headers["retry-after-ms"]) >= 1
    assert refused.headers[RID] and refused.headers["x-limit-hit"] == "queue_size"
    assert "queue is full" in _error(refused, "rate_limited_error")
    assert "typed_decisions_queue_depth 2.0" in metrics
    assert [r.status_code for r in done] == [200, 200, 200]


def test_shutdown_finishes_in_flight_and_refuses_new_with_503():
    fake = FakeDecider()
    app = create_app(fake, settings=ServerSettings())
    service = app.state.service

    async def scenario(client):
        fake.gate.clear()
        fake.entered.clear()
        inflight = asyncio.create_task(client.post("/v1/systemone", json=_request("in flight")))
        await asyncio.to_thread(fake.entered.wait, 5)
        service.begin_shutdown()
        refused = await client.post("/v1/systemone", json=REQUEST)
        ready = await client.get("/readyz")
        fake.gate.set()
        return refused, ready, await inflight

    refused, ready, finished = asyncio.run(_live(app, scenario))
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "shutting down" in _error(refused, "unavailable_error")
    assert ready.status_code == 503
    assert finished.status_code == 200


# --------------------------------------------------------------------------- the preset route


PRESET_STATE = {"state": "I was charged twice this month, please refund me."}


def test_preset_route_goes_through_the_batcher_with_its_label_mode():
    fake = FakeDecider(delay=0.05)
    app = create_app(fake, settings=ServerSettings(max_batch=8, max_wait_ms=50))

    async def scenario(client):
        return await asyncio.gather(
            client.post("/v1/systemone", json=_request("a decision request")),
            client.post("/v1/presets/support-ticket-routing", json=PRESET_STATE),
            client.post("/v1/presets/support-ticket-routing",
                        json={**PRESET_STATE, "params": {"label_mode": "letters"}}))

    responses = asyncio.run(_live(app, scenario))
    assert [r.status_code for r in responses] == [200, 200, 200], [r.text for r in responses]
    # After the self-test (1 request, default mode): one engine call per label mode present.
    assert sorted(zip(fake.calls[1:], map(str, fake.label_modes[1:]))) == [(1, "letters"), (2, "None")]
    body = responses[1].json()
    answer = body["answers"]["team"]
    expected = FakeDecider().run(
        {"model": "fake-model", "state": PRESET_STATE["state"],
         "questions": {"team": load_preset("support-ticket-routing").question_spec().question()}})
    assert answer == expected.answers["team"].model_dump(exclude_none=True)
    assert body["act"]["probability"] == max(answer["probabilities"].values())


def test_preset_route_queue_full_is_429_and_counts_in_flight():
    fake = FakeDecider()
    app = create_app(fake, settings=ServerSettings(max_batch=1, max_wait_ms=0, queue_size=1))
    service = app.state.service

    async def scenario(client):
        fake.gate.clear()                                           # after the start-up self-test
        fake.entered.clear()
        first = asyncio.create_task(client.post("/v1/presets/sms-spam", json=PRESET_STATE))
        await asyncio.to_thread(fake.entered.wait, 5)              # the engine holds request 1
        queued = asyncio.create_task(client.post("/v1/presets/sms-spam", json=PRESET_STATE))
        await asyncio.sleep(0.05)
        in_flight = service.in_flight
        refused = await client.post("/v1/presets/sms-spam", json=PRESET_STATE)
        fake.gate.set()
        return refused, in_flight, await asyncio.gather(first, queued)

    refused, in_flight, done = asyncio.run(_live(app, scenario))
    assert in_flight == 2
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "queue is full" in _error(refused, "rate_limited_error")
    assert [r.status_code for r in done] == [200, 200]


def test_preset_route_drains_on_shutdown_and_writes_an_audit_line(tmp_path):
    log = tmp_path / "audit.jsonl"
    fake = FakeDecider()
    app = create_app(fake, settings=ServerSettings(audit_log=log))
    service = app.state.service

    async def scenario(client):
        fake.gate.clear()
        fake.entered.clear()
        inflight = asyncio.create_task(client.post("/v1/presets/sms-spam", json=PRESET_STATE))
        await asyncio.to_thread(fake.entered.wait, 5)
        service.begin_shutdown()
        refused = await client.post("/v1/presets/sms-spam", json=PRESET_STATE)
        fake.gate.set()
        return refused, await inflight

    refused, finished = asyncio.run(_live(app, scenario))
    assert refused.status_code == 503 and "shutting down" in _error(refused, "unavailable_error")
    assert finished.status_code == 200
    (line,) = map(json.loads, log.read_text().splitlines())
    assert line["preset"] == {"name": "sms-spam", "version": load_preset("sms-spam").version} and line["status"] == 200
    assert line["questions"] == {"spam": "noul"} and line["answers"] == finished.json()["answers"]
    assert line["state_sha256"] == json_sha256(PRESET_STATE["state"]) and line["request_id"] == finished.headers[RID]


def test_loading_in_background_healthz_up_readyz_503():
    release = threading.Event()

    def factory():
        release.wait(10)
        return FakeDecider()

    app = create_app(factory, settings=ServerSettings())

    async def scenario(client):
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
        early = await client.post("/v1/systemone", json=REQUEST)
        release.set()
        for _ in range(200):
            if (await client.get("/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.01)
        return health, ready, early, await client.post("/v1/systemone", json=REQUEST)

    health, ready, early, later = asyncio.run(_live(app, scenario))
    assert health.status_code == 200
    assert ready.status_code == 503 and "loading" in _error(ready, "unavailable_error")
    assert early.status_code == 503 and early.headers["retry-after"]
    assert later.status_code == 200


def test_failed_load_is_reported_by_readyz():
    def factory():
        raise FileNotFoundError("no manifest.json in /nowhere")

    with TestClient(create_app(factory, settings=ServerSettings())) as c:
        for _ in range(200):
            r = c.get("/readyz")
            if "failed" in r.text:
                break
            time.sleep(0.01)
        assert r.status_code == 503 and "manifest.json" in _error(r, "unavailable_error")


# --------------------------------------------------------------------------- metrics, audit, openapi


def test_metrics_content():
    with _client() as c:
        c.post("/v1/systemone", json=REQUEST)
        c.post("/v1/systemone", json={**REQUEST, "model": "nope"})
        text = c.get("/metrics").text
    for line in ('typed_decisions_http_requests_total{route="/v1/systemone",status="200"} 1.0',
                 'typed_decisions_http_requests_total{route="/v1/systemone",status="404"} 1.0',
                 'typed_decisions_questions_total{type="choice"} 1.0',
                 'typed_decisions_questions_total{type="noul"} 1.0',
                 "typed_decisions_request_seconds_count 1.0", "typed_decisions_queue_depth 0.0",
                 "typed_decisions_tokens_computed_total", "typed_decisions_tokens_logical_total",
                 "typed_decisions_prefix_cache_hits_total", "typed_decisions_prefix_cache_misses_total 2.0",
                 "typed_decisions_batch_requests_bucket"):
        assert line in text, line


def test_metrics_registries_are_per_app():
    with _client() as a, _client() as b:
        a.post("/v1/systemone", json=REQUEST)
        assert 'status="200"} 1.0' in a.get("/metrics").text
        assert 'route="/v1/systemone",status="200"' not in b.get("/metrics").text


def test_audit_log_has_hashes_not_state_or_keys(tmp_path):
    log = tmp_path / "audit.jsonl"
    with _client(api_keys={"sk-secret": "alice"}, audit_log=log) as c:
        h = {"Authorization": "Bearer sk-secret"}
        ok = c.post("/v1/systemone", json=REQUEST, headers=h)
        c.post("/v1/systemone", json={**REQUEST, "model": "nope"}, headers={**h, "X-Caller": "billing-bot"})
    text = log.read_text()
    first, second = map(json.loads, text.splitlines())
    assert "sk-secret" not in text and "charged twice" not in text
    assert first["request_id"] == ok.headers[RID] and first["caller"] == "alice"
    assert first["state_sha256"] == json_sha256(REQUEST["state"]) and first["status"] == 200
    assert first["questions"] == {"team": "choice", "urgent": "noul", "severity": "score"}
    assert first["answers"] == ok.json()["answers"] and first["latency_ms"] >= 0
    assert second["caller"] == "billing-bot" and second["status"] == 404 and second["answers"] is None


def test_openapi_publishes_the_request_and_response_models():
    with _client() as c:
        spec = c.get("/openapi.json").json()
    post = spec["paths"]["/v1/systemone"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/DecisionRequest")
    assert {"DecisionRequest", "DecisionResponse", "Choice", "Noul", "Score"} <= set(spec["components"]["schemas"])
    assert {"200", "401", "404", "413", "415", "422", "429", "503"} <= set(post["responses"])


# --------------------------------------------------------------------------- real client, live server


@contextlib.contextmanager
def live_server(decider: Any, **settings: Any) -> Iterator[str]:
    """uvicorn on 127.0.0.1 (a free port) in a thread; yields the base URL; stops at the end."""
    import uvicorn

    app = create_app(decider, settings=ServerSettings(**settings))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _sdk_questions(sdk):
    return {
        "team": sdk.Choice(instructions="Which team should handle this?",
                           criteria={"billing": "Payments, refunds, invoices", "tech": "Bugs, outages"}),
        "urgent": sdk.Noul(instructions="Is it urgent?"),
        "severity": sdk.Score(instructions="How severe is it?", criteria=["low", "medium", "high"]),
    }


def _check_sdk_response(result, decider_name: str) -> None:
    assert result.model == decider_name
    assert result.choices["team"].choice in {"billing", "tech"}
    assert 0 <= result.nouls["urgent"].noul <= 1
    assert set(result.scores["severity"].probabilities) == {0, 1, 2}
    assert isinstance(result.usage.input_tokens, int) and result.usage.input_tokens > 0
    assert result.request_id.startswith("req_")


def _sdk_client_suite(decider: Any, state: str, n_async: int = 3) -> dict[str, Any]:
    """Sync + async SDK clients, with and without zstd; error classes. Returns the answers."""
    sdk = require("typesafe_sdk", "pip install 'typed-decisions-runtime[test]'")
    no_retry = sdk.RetryPolicy(max_retries=0)
    answers = {}
    with live_server(decider, api_keys={"sk-test": "tests"}) as url:
        for compression in ("zstd", False):
            with sdk.TypeSafeClient(api_key="sk-test", base_url=url, compression=compression,
                                    retry=no_retry, timeout=60) as client:
                result = client.system_one(state, _sdk_questions(sdk))
                _check_sdk_response(result, decider.name)
                answers[f"sync-{compression}"] = result.model_dump(mode="json")["answers"]
                assert [m.name for m in client.models.list().models][:2] == [decider.name, "jev-latest"]
                with pytest.raises(sdk.TypeSafeUnprocessableEntityError) as e:
                    client.system_one(state, {"team": sdk.Choice(criteria={"a": None}),
                                              "bad": {"type": "score", "criteria": ["only one"]}})
                assert "questions.bad.criteria" in str(e.value) and e.value.request_id
                with pytest.raises(sdk.TypeSafeNotFoundError) as e:
                    client.system_one(state, _sdk_questions(sdk), model="no-such-model")
                # the SDK reads detail.message of {"detail": {"error_type", "message"}} (#33), not the raw body
                assert "jev-latest" in str(e.value) and "error_type" not in str(e.value)
        with sdk.TypeSafeClient(api_key="sk-wrong", base_url=url, retry=no_retry) as client:
            with pytest.raises(sdk.TypeSafeAuthenticationError) as e:
                client.system_one(state, _sdk_questions(sdk))
            assert "unknown API key" in str(e.value) and "error_type" not in str(e.value)

        async def run_async():
            async with sdk.AsyncTypeSafeClient(api_key="sk-test", base_url=url, retry=no_retry,
                                               timeout=60) as client:
                results = await asyncio.gather(*(client.system_one(state, _sdk_questions(sdk))
                                                 for _ in range(n_async)))
                models = await client.models.list()
                return results, models

        results, models = asyncio.run(run_async())
        for result in results:
            _check_sdk_response(result, decider.name)
        answers["async"] = results[0].model_dump(mode="json")["answers"]
        assert len({r.request_id for r in results}) == n_async
    return answers


def test_sdk_against_fake_model():
    long_state = "My order #1234 arrived broken. " * 60   # > 1024 bytes: the zstd path
    answers = _sdk_client_suite(FakeDecider(), long_state)
    assert answers["sync-zstd"] == answers["sync-False"] == answers["async"]


# --------------------------------------------------------------------------- the tiny real model


def test_sdk_against_tiny_real_model(tiny_decider):
    long_state = "I was charged twice for my subscription this month. " * 30
    answers = _sdk_client_suite(tiny_decider, long_state, n_async=2)
    sdk = require("typesafe_sdk")
    questions = {k: q.model_dump(mode="json", exclude_none=True) if hasattr(q, "model_dump") else q
                 for k, q in _sdk_questions(sdk).items()}
    want = tiny_decider.run({"model": tiny_decider.name, "state": long_state,
                             "questions": questions}).model_dump(mode="json")
    for path in ("sync-zstd", "sync-False", "async"):
        got = {"answers": answers[path]}
        assert set(got["answers"]) == set(want["answers"]), path
        for name, probs in _probabilities(want).items():  # the in-process Decider's answers
            assert _probabilities(got)[name] == pytest.approx(probs, abs=1e-5), (path, name)
        assert got["answers"]["team"]["choice"] == want["answers"]["team"]["choice"]
        assert got["answers"]["severity"]["score"] == pytest.approx(want["answers"]["severity"]["score"], abs=1e-5)


def _probabilities(body: dict[str, Any]) -> dict[str, Any]:
    return {n: a.get("probabilities", {"yes": a.get("noul")}) for n, a in body["answers"].items()}


def test_real_model_micro_batched_equals_one_by_one(tiny_decider):
    requests = [_request(s) for s in ("I was charged twice.", "The app crashes at login.")]
    requests.append({**_request("Tell me about the weather."),
                     "questions": {"tone": {"type": "choice", "criteria": {"calm": None, "angry": None}}}})
    one_by_one = [tiny_decider.run(r).model_dump(mode="json") for r in requests]
    calls_before = tiny_decider.engine.stats.calls
    app = create_app(tiny_decider, settings=ServerSettings(max_batch=8, max_wait_ms=200))

    async def scenario(client):
        return await asyncio.gather(*(client.post("/v1/systemone", json=r) for r in requests))

    responses = asyncio.run(_live(app, scenario))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    samples = {s.name: s.value for s in app.state.service.metrics.batch_size.collect()[0].samples
               if not s.labels}
    assert samples["typed_decisions_batch_requests_sum"] == len(requests) + 1   # + the self-test
    assert samples["typed_decisions_batch_requests_count"] <= 3                 # self-test + 1-2 batches
    assert tiny_decider.engine.stats.calls - calls_before <= 3
    for got, want in zip(responses, one_by_one):
        body = got.json()
        assert body["usage"] == want["usage"]
        for name, probs in _probabilities(want).items():
            assert _probabilities(body)[name] == pytest.approx(probs, abs=1e-5), name


def test_real_model_errors_map_to_422(tiny_decider):
    app = create_app(tiny_decider, settings=ServerSettings())
    with TestClient(app) as c:
        long = _request("word " * 20000)
        r = c.post("/v1/systemone", json=long)
        assert r.status_code in (413, 422), r.text
        if r.status_code == 422:
            assert _detail(r)[0]["type"] == "context_too_long"
        ok = c.post("/v1/systemone", json=REQUEST)
        assert ok.status_code == 200
        metrics = c.get("/metrics").text
    computed = [l for l in metrics.splitlines() if l.startswith("typed_decisions_tokens_computed_total")]
    assert computed and float(computed[0].split()[-1]) > 0


# --------------------------------------------------------------------------- no 5xx for bad input


def _mutations(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every leaf and container of ``value`` replaced by wrong-typed values, or deleted (None)."""
    for bad in (None, 0, 1.5, True, "", "x", [], {}, [None], {"": None}):
        yield path, bad
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _mutations(child, (*path, key))


def _mutated(path: tuple, bad: Any) -> Any:
    doc = json.loads(json.dumps(REQUEST))
    if not path:
        return bad
    *head, last = path
    target = doc
    for key in head:
        target = target[key]
    target[last] = bad
    return doc


def test_malformed_requests_are_4xx_never_5xx():
    cases = list(_mutations(REQUEST))
    assert len(cases) > 150
    with _client() as c:
        for path, bad in cases:
            r = c.post("/v1/systemone", json=_mutated(path, bad))
            assert r.status_code < 500, (path, bad, r.text)
            if r.status_code != 200:
                assert r.status_code in (404, 422), (path, bad, r.text)
                _detail(r) if r.status_code == 422 else _error(r, "model_not_found_error")


# --------------------------------------------------------------------------- the CLI, as deployed


def _serve(cmd: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """``typed-decisions serve`` in a subprocess on a free port; returns once /readyz is 200."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*cmd, "--host", "127.0.0.1", "--port", str(port), "--threads", str(THREADS)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}:\n{proc.stdout.read() if proc.stdout else ''}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.2)
    proc.kill()
    pytest.fail("serve did not become ready within 120 s")


def _sigterm_while_busy(proc: subprocess.Popen[str], url: str, headers: dict[str, str]) -> list[int]:
    """Three requests in flight, then SIGTERM: returns their statuses; the shutdown must be clean."""

    async def scenario() -> list[int]:
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
            tasks = [asyncio.create_task(client.post("/v1/systemone", json=_request(f"ticket {i}")))
                     for i in range(3)]
            await asyncio.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            return [(await t).status_code for t in tasks]

    try:
        codes = asyncio.run(scenario())
        # uvicorn re-raises the signal after its graceful shutdown: exit by SIGTERM is the clean exit
        assert proc.wait(60) in (0, -signal.SIGTERM)
        assert proc.stdout is not None and "Application shutdown complete" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    return codes


def test_cli_serve_drains_on_sigterm(tiny_model_dir, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("ci sk-ci\n")
    proc, url = _serve([sys.executable, "-m", "typed_decisions.cli", "serve", "--model", str(tiny_model_dir),
                        "--alias", "jev-latest", "--alias", "house"],
                       env={"TYPED_DECISIONS_API_KEYS_FILE": str(keys), "TYPED_DECISIONS_MAX_WAIT_MS": "20"})
    auth = {"Authorization": "Bearer sk-ci"}
    models = httpx.get(url + "/v1/models", headers=auth).json()["models"]
    # the operator's aliases, then the catalogue's alias of the served model, as the CLI accepts it
    assert [m["name"] for m in models][1:] == ["jev-latest", "house", "tiny"]
    assert httpx.post(url + "/v1/systemone", json=REQUEST).status_code == 401
    by_alias = httpx.post(url + "/v1/systemone", json={**REQUEST, "model": "tiny"}, headers=auth, timeout=120)
    assert by_alias.status_code == 200 and by_alias.json()["model"] == "smollm2-135m"
    assert _sigterm_while_busy(proc, url, auth) == [200, 200, 200]


@pytest.mark.slow  # installs the runtime into a fresh venv from PyPI (~80 s): opt in with --run-slow
def test_fresh_runtime_only_venv_serves_the_tiny_export(tiny_model_dir, tmp_path):
    """Deployment as docs/deploy.md describes it: the runtime + [server] only, no torch."""
    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{root}[server]"], check=True)
    probe = "import importlib.util as u; print(u.find_spec('torch') is None and u.find_spec('transformers') is None)"
    assert subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "True"
    proc, url = _serve([str(venv / "bin" / "typed-decisions"), "serve", "--model", str(tiny_model_dir)])
    assert _sigterm_while_busy(proc, url, {}) == [200, 200, 200]
