"""Remote mode: the same Runnables over HTTP (System One wire format), against httpx.MockTransport.

The backend itself (error mapping, headers, async) is tested once, in tests/test_client.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from langchain_typed_decisions import ChoiceRunnable, DecisionRunnable
from typed_decisions.errors import InvalidRequestError, ServerBusyError

TEAM = {"type": "choice", "criteria": {"billing": None, "tech": None}}


def server(fake, seen: list[httpx.Request]):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        if request.headers.get("authorization") != "Bearer k-1":
            return httpx.Response(401, json={"detail": [{"loc": [], "msg": "unknown key", "type": "authentication"}]})
        if body["state"] == "busy":
            return httpx.Response(429, headers={"retry-after": "3"},
                                  json={"detail": [{"loc": [], "msg": "queue full", "type": "server_busy"}]})
        if body["state"] == "bad":
            return httpx.Response(422, json={"detail": [{"loc": ["body", "questions", "team", "criteria"],
                                                         "msg": "needs an option", "type": "invalid_request"}]})
        return httpx.Response(200, json=fake.run(body).model_dump(mode="json"))
    return httpx.MockTransport(handle)


def test_remote_matches_local(fake_decider) -> None:
    seen: list[httpx.Request] = []
    remote = DecisionRunnable(base_url="http://td.test/", model="fake", api_key="k-1",
                              client_kwargs={"transport": server(fake_decider, seen)},
                              questions={"team": TEAM})
    local = DecisionRunnable(decider=fake_decider, questions={"team": TEAM})
    assert remote.invoke("tech") == local.invoke("tech")
    assert str(seen[0].url) == "http://td.test/v1/systemone"
    assert json.loads(seen[0].content) == {"model": "fake", "state": "tech",
                                           "questions": {"team": TEAM}}
    assert remote.batch(["a", "tech"]) == local.batch(["a", "tech"])
    assert asyncio.run(remote.abatch(["a", "tech"])) == local.batch(["a", "tech"])
    assert "k-1" not in repr(remote) and "k-1" not in repr(remote.backend)


def test_key_from_environment(fake_decider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPED_DECISIONS_API_KEY", "k-1")
    seen: list[httpx.Request] = []
    team = ChoiceRunnable(base_url="http://td.test", model="fake", question=TEAM,
                          client_kwargs={"transport": server(fake_decider, seen)})
    assert team.invoke("billing") == "billing"



def test_server_errors_reach_the_caller_unwrapped(fake_decider) -> None:
    seen: list[httpx.Request] = []
    team = ChoiceRunnable(base_url="http://td.test", model="fake", api_key="k-1", question=TEAM,
                          client_kwargs={"transport": server(fake_decider, seen)})
    with pytest.raises(InvalidRequestError, match="needs an option"):
        team.invoke("bad")
    with pytest.raises(ServerBusyError):
        asyncio.run(team.abatch(["tech", "busy"]))
