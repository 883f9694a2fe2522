"""The first-hour routes of the server: ``POST /v1/explain``, ``GET /v1/presets/{name}``, the
playground page, and abandoned requests (a client that leaves while queued costs no engine call)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import td_fakes
from td_live import live_server
from typed_decisions.server import create_app

EXAMPLE = json.loads((Path(__file__).resolve().parents[1] / "examples" / "ticket.json").read_text())


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


# --------------------------------------------------------------------------- explain on the tiny model


def test_explain_route_answers_as_systemone_and_explains(tiny_decider):
    req = {**EXAMPLE, "model": tiny_decider.name}
    with TestClient(create_app(tiny_decider)) as client:
        answered = client.post("/v1/systemone", json=req)
        explained = client.post("/v1/explain", json=req)
        bad = client.post("/v1/explain", json={**req, "questions": {"q": {"type": "choice", "criteria": {}}}})
    assert answered.status_code == explained.status_code == 200
    body = explained.json()
    assert body["answers"] == answered.json()["answers"]
    assert set(body["questions"]) == set(req["questions"])
    for name, q in body["questions"].items():
        assert q["answer"] == body["answers"][name]
        assert sum(o["probability"] for o in q["options"]) == pytest.approx(1.0, abs=1e-9)
        assert all(tok["text"] for o in q["options"] for p in o["paths"] for tok in p["tokens"])
    score = body["questions"]["urgency"]
    levels = req["questions"]["urgency"]["criteria"]
    assert [o["meaning"] for o in score["options"]] == levels  # "0","1",.. mapped back to their levels
    assert body["tokens"]["prefix_tokens"] == len(body["prefix_ids"]) > 0
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:3] == ["body", "questions", "q"]


def test_preset_file_route_and_playground_page():
    with TestClient(create_app(td_fakes.FakeDecider(name="fake-model"))) as client:
        one = client.get("/v1/presets/support-ticket-routing")
        missing = client.get("/v1/presets/no-such-preset")
        a_path = client.get("/v1/presets/%2Fetc%2Fpasswd.json")
        page = client.get("/playground")
        root = client.get("/", follow_redirects=False)
    assert one.status_code == 200
    assert one.json()["question"]["type"] == "choice" and "billing" in one.json()["question"]["criteria"]
    assert missing.status_code == 404 and "no-such-preset" in missing.text
    assert a_path.status_code == 404 and "root:" not in a_path.text  # never a file of the server
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/v1/explain" in page.text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page.text)  # nothing from elsewhere (no CDN)
    assert root.status_code in (307, 302) and root.headers["location"] == "/playground"


# --------------------------------------------------------------------------- abandoned requests


class RecordingFake(td_fakes.FakeDecider):
    """The shared fake, recording the state of every request that reached the engine."""

    def __init__(self) -> None:
        super().__init__(name="fake-model")
        self.states: list[Any] = []

    def run_many(self, requests: Any, **kw: Any) -> Any:
        out = super().run_many(requests, **kw)
        self.states += [r["state"] if isinstance(r, dict) else r.state for r in requests]
        return out


def _raw_post(base: str, body: dict[str, Any]) -> socket.socket:
    """Send a whole POST /v1/systemone on a raw socket and return it, unread (to close it)."""
    host, port = base.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def test_a_client_that_leaves_while_queued_costs_no_engine_call():
    fake = RecordingFake()
    req = lambda state: {"model": "fake-model", "state": state,  # noqa: E731
                         "questions": {"urgent": {"type": "noul", "instructions": "Is it urgent?"}}}
    with live_server(fake, max_batch=1, max_wait_ms=0) as base:
        fake.gate.clear()
        fake.entered.clear()
        held: dict[str, httpx.Response] = {}
        first = threading.Thread(target=lambda: held.update(r=httpx.post(base + "/v1/systemone",
                                                                          json=req("held"), timeout=30)))
        first.start()
        assert fake.entered.wait(10), "the first request never reached the engine"
        leaver = _raw_post(base, req("abandoned"))
        time.sleep(0.3)                      # it is queued behind the held one
        leaver.close()                       # ... and its client goes away
        for _ in range(200):
            if _metric(httpx.get(base + "/metrics").text, "typed_decisions_client_disconnects_total") >= 1:
                break
            time.sleep(0.02)
        fake.gate.set()
        first.join(30)
        after = httpx.post(base + "/v1/systemone", json=req("after"), timeout=30)
        metrics = httpx.get(base + "/metrics").text
    assert held["r"].status_code == 200 and after.status_code == 200
    assert "abandoned" not in fake.states, fake.states            # no engine call for it
    assert fake.states[-2:] == ["held", "after"]
    assert _metric(metrics, "typed_decisions_client_disconnects_total") == 1
    assert _metric(metrics, "typed_decisions_dropped_before_engine_total") == 1
    assert 'typed_decisions_http_requests_total{route="/v1/systemone",status="499"} 1.0' in metrics
