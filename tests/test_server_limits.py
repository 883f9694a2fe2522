"""Per-key limits (typed_decisions.server.limits) and the one request path of every model route.

The token bucket runs on an injected clock (no sleeps, no timed asserts); the starvation test runs
the same greedy-vs-polite flood twice against an engine held still, without and with the per-key
bound, so it shows both the failure the bound prevents and that it prevents it, whatever the
machine's load; a live storm then checks the bound under moving traffic.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from typing import Any

import httpx
import pytest

from td_optional import require  # noqa: E402

require("fastapi", "pip install 'typed-decisions-runtime[server]'")

import td_fakes  # noqa: E402
from typed_decisions.errors import RateLimitedError  # noqa: E402
from typed_decisions.server import ServerSettings, create_app  # noqa: E402
from typed_decisions.server.limits import KeyLimits, Limiter  # noqa: E402

KEYS = {"sk-greedy": "greedy", "sk-polite": "polite"}
GREEDY = {"Authorization": "Bearer sk-greedy"}
POLITE = {"Authorization": "Bearer sk-polite"}


def _request(state: str) -> dict[str, Any]:
    return {"model": "fake-model", "state": state,
            "questions": {"urgent": {"type": "noul", "instructions": "Is it urgent?"}}}


async def _live(app, scenario):
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            return await scenario(client)


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}\{{{re.escape(want)}\}} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


# --------------------------------------------------------------------------- the limiter alone


def test_token_bucket_on_a_fake_clock():
    now = [100.0]
    limiter = Limiter(clock=lambda: now[0])
    limits = KeyLimits(requests_per_minute=60, burst=2)          # 1 token per second, 2 at most
    for _ in range(2):
        limiter.acquire("a", limits)
        limiter.release("a")
    with pytest.raises(RateLimitedError) as e:
        limiter.acquire("a", limits)
    assert e.value.limit == "key_requests_per_minute" and e.value.retry_after_s == pytest.approx(1.0)
    limiter.acquire("b", limits)                                   # other keys have their own bucket
    now[0] += 0.25
    with pytest.raises(RateLimitedError) as e:
        limiter.acquire("a", limits)
    assert e.value.retry_after_s == pytest.approx(0.75)
    now[0] += 0.75
    limiter.acquire("a", limits)                                   # one token refilled
    assert limiter.in_flight("a") == 1


def test_concurrency_bound_counts_until_release():
    limiter = Limiter()
    limits = KeyLimits(max_concurrent=2)
    limiter.acquire("a", limits)
    limiter.acquire("a", limits)
    with pytest.raises(RateLimitedError) as e:
        limiter.acquire("a", limits, busy_retry_s=0.4)
    assert e.value.limit == "key_concurrency" and e.value.retry_after_s == 0.4
    limiter.release("a")
    limiter.acquire("a", limits)


# --------------------------------------------------------------------------- over HTTP


def test_rate_limit_is_429_naming_the_limit_with_retry_after_and_counted_per_key():
    app = create_app(td_fakes.FakeDecider("fake-model"), settings=ServerSettings(
        api_keys=KEYS, key_requests_per_minute=6, key_burst=2))

    async def scenario(client):
        codes = [(await client.post("/v1/systemone", json=_request(f"r{i}"), headers=GREEDY))
                 for i in range(3)]
        polite = await client.post("/v1/systemone", json=_request("mine"), headers=POLITE)
        metrics = (await client.get("/metrics", headers=POLITE)).text
        return codes, polite, metrics

    (ok1, ok2, refused), polite, metrics = asyncio.run(_live(app, scenario))
    assert ok1.status_code == ok2.status_code == polite.status_code == 200
    assert refused.status_code == 429 and refused.headers["x-limit-hit"] == "key_requests_per_minute"
    assert 9 <= int(refused.headers["retry-after"]) <= 10          # 6/min: one token per 10 s
    detail = refused.json()["detail"]
    assert detail["error_type"] == "rate_limited_error"
    assert "key_requests_per_minute = 6" in detail["message"] and "'greedy'" in detail["message"]
    assert _metric(metrics, "typed_decisions_key_limited_total", key="greedy",
                   limit="key_requests_per_minute") == 1
    assert _metric(metrics, "typed_decisions_key_requests_total", key="greedy", status="200") == 2
    assert _metric(metrics, "typed_decisions_key_requests_total", key="greedy", status="429") == 1
    assert _metric(metrics, "typed_decisions_key_requests_total", key="polite", status="200") == 1


def _held_flood(key_max_concurrent: int | None) -> tuple[list[httpx.Response], httpx.Response, int]:
    """The engine is held on one greedy request; 20 more greedy requests arrive at once, then one
    polite request; then the engine is let go. Nothing leaves the queue (8 places) while the engine
    is held, so who is refused does not depend on timing. Returns the greedy responses (the held
    one first), the polite one and the queue's depth when the polite request arrived."""
    fake = td_fakes.FakeDecider("fake-model")
    app = create_app(fake, settings=ServerSettings(api_keys=KEYS, max_batch=2, max_wait_ms=1,
                                                   queue_size=8, key_max_concurrent=key_max_concurrent))
    service = app.state.service

    async def settled(tasks: list[asyncio.Task], queued: int) -> None:
        """Until every task is either answered (refused) or one of the ``queued`` waiting."""
        for _ in range(500):
            if sum(t.done() for t in tasks) + service.batcher.depth - queued == len(tasks):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{sum(t.done() for t in tasks)} done, {service.batcher.depth} queued")

    async def scenario(client):
        fake.gate.clear()
        fake.entered.clear()
        held = asyncio.create_task(client.post("/v1/systemone", json=_request("greedy held"), headers=GREEDY))
        await asyncio.to_thread(fake.entered.wait, 5)
        flood = [asyncio.create_task(client.post("/v1/systemone", json=_request(f"greedy {i}"),
                                                 headers=GREEDY)) for i in range(20)]
        await settled(flood, queued=0)
        depth = service.batcher.depth
        polite = asyncio.create_task(client.post("/v1/systemone", json=_request("polite"), headers=POLITE))
        await settled([polite], queued=depth)
        fake.gate.set()
        return [await held, *await asyncio.gather(*flood)], await polite, depth

    return asyncio.run(_live(app, scenario))


def _storm(key_max_concurrent: int | None) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """A greedy key fires 40 requests at once, then more as answers come; meanwhile a polite key
    sends 6, one at a time. The engine is slow (20 ms a batch of at most 2); the queue holds 8."""
    fake = td_fakes.FakeDecider("fake-model", delay=0.02)
    app = create_app(fake, settings=ServerSettings(api_keys=KEYS, max_batch=2, max_wait_ms=1,
                                                   queue_size=8, key_max_concurrent=key_max_concurrent))

    async def scenario(client):
        greedy: list[httpx.Response] = []
        stop = asyncio.Event()

        async def hog(i: int) -> None:
            while not stop.is_set():
                r = await client.post("/v1/systemone", json=_request(f"greedy {i}"), headers=GREEDY)
                greedy.append(r)
                if r.status_code == 429:
                    await asyncio.sleep(0.005)  # a retrying client, not a spin

        hogs = [asyncio.create_task(hog(i)) for i in range(40)]
        await asyncio.sleep(0.05)
        polite = []
        for i in range(6):
            polite.append(await client.post("/v1/systemone", json=_request(f"polite {i}"), headers=POLITE))
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.gather(*hogs)
        return greedy, polite

    return asyncio.run(_live(app, scenario))


def _codes(responses: list[httpx.Response]) -> Counter[str]:
    """How many responses were answered (200) and refused, by the limit they hit."""
    return Counter("200" if r.status_code == 200 else f"{r.status_code} {r.headers.get('x-limit-hit')}"
                   for r in responses)


def test_without_a_per_key_bound_a_greedy_key_fills_the_queue_and_the_polite_one_is_refused():
    greedy, polite, depth = _held_flood(key_max_concurrent=None)
    assert depth == 8
    assert polite.status_code == 429 and polite.headers["x-limit-hit"] == "queue_size", polite.text
    assert _codes(greedy) == {"200": 9, "429 queue_size": 12}      # the held one and the 8 queued


def test_a_greedy_key_cannot_starve_a_polite_one():
    # With the bound (4 in flight per key, below the queue's 8) the greedy key is held to 4 and told
    # which limit it hit, never that the queue is full; the polite request is queued and answered.
    greedy, polite, depth = _held_flood(key_max_concurrent=4)
    assert depth == 3                                               # the held one is in the engine
    assert polite.status_code == 200 and polite.json()["answers"]["urgent"]["noul"] >= 0, polite.text
    assert _codes(greedy) == {"200": 4, "429 key_concurrency": 17}
    # The same under live traffic: 40 greedy clients retrying against a slow engine.
    greedy, polite_storm = _storm(key_max_concurrent=4)
    assert [r.status_code for r in polite_storm] == [200] * 6
    assert all(r.json()["answers"]["urgent"]["noul"] >= 0 for r in polite_storm)
    limits_hit = {r.headers.get("x-limit-hit") for r in greedy if r.status_code == 429}
    assert limits_hit == {"key_concurrency"}
    assert sum(r.status_code == 200 for r in greedy) > 0


# --------------------------------------------------------------------------- every route that runs the model

PRESET = {"state": "I was charged twice this month, please refund me."}
ROUTES = {"/v1/systemone": _request("x"), "/v1/explain": _request("x"), "/v1/presets/sms-spam": PRESET}


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_model_route_takes_the_limits_the_audit_and_the_drain(route, tmp_path):
    """Held in the engine, a request of key A on ``route`` uses A's one slot: A's next request (by
    any route) is 429 key_concurrency, key B is served; every request has an audit line with its
    key; shutdown waits for the held request and refuses new ones (503)."""
    audit = tmp_path / "audit.jsonl"
    fake = td_fakes.FakeDecider("fake-model")
    keys = {"sk-a": "a", "sk-b": "b"}
    app = create_app(fake, settings=ServerSettings(api_keys=keys, key_max_concurrent=1, audit_log=audit))
    service = app.state.service
    a, b = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-b"}

    async def scenario(client):
        fake.gate.clear()
        fake.entered.clear()
        held = asyncio.create_task(client.post(route, json=ROUTES[route], headers=a))
        await asyncio.to_thread(fake.entered.wait, 5)
        over = [await client.post(r, json=body, headers=a) for r, body in ROUTES.items()]
        in_flight = service.in_flight
        other = asyncio.create_task(client.post(route, json=ROUTES[route], headers=b))
        await asyncio.sleep(0.05)
        service.begin_shutdown()
        late = await client.post(route, json=ROUTES[route], headers=b)
        fake.gate.set()
        return over, in_flight, late, await held, await other

    over, in_flight, late, held, other = asyncio.run(_live(app, scenario))
    assert [r.status_code for r in over] == [429, 429, 429]
    assert {r.headers["x-limit-hit"] for r in over} == {"key_concurrency"}
    assert in_flight == 1
    assert held.status_code == 200 and other.status_code == 200, (held.text, other.text)
    assert late.status_code == 503
    lines = [json.loads(ln) for ln in audit.read_text().splitlines()]
    assert sorted((ln["key"], ln["status"]) for ln in lines) == [("a", 200), ("a", 429), ("a", 429),
                                                                ("a", 429), ("b", 200)]
    assert {ln["route"] for ln in lines if ln["status"] == 200} == {route}


def test_a_keys_file_line_overrides_the_server_wide_limits(tmp_path, capsys):
    """``keys add --rpm 60 --burst 1`` limits that key; the server-wide default (no rate) keeps the
    other key unlimited."""
    from typed_decisions.cli import main as cli
    from typed_decisions.server import load_api_keys

    path = tmp_path / "api-keys"
    assert cli(["keys", "add", "metered", "--rpm", "60", "--burst", "1", "--file", str(path)]) == 0
    assert cli(["keys", "add", "free", "--file", str(path)]) == 0
    metered, free = capsys.readouterr().out.split()
    app = create_app(td_fakes.FakeDecider("fake-model"), settings=ServerSettings(api_keys=load_api_keys(path)))

    async def scenario(client):
        out = {}
        for name, key in (("metered", metered), ("free", free)):
            out[name] = [(await client.post("/v1/systemone", json=_request(f"{name} {i}"),
                                            headers={"Authorization": f"Bearer {key}"})) for i in range(3)]
        return out

    out = asyncio.run(_live(app, scenario))
    assert [r.status_code for r in out["metered"]] == [200, 429, 429]
    assert out["metered"][1].headers["x-limit-hit"] == "key_requests_per_minute"
    assert [r.status_code for r in out["free"]] == [200, 200, 200]
