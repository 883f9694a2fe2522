"""typed_decisions.client: the local and remote backends every integration calls.

No network: the server is an ``httpx.MockTransport`` answering with a deterministic fake decider
(the wire models are the core's own); one test loads the tiny real export from a path.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from typed_decisions import client
from typed_decisions.client import Backend, LocalBackend, RemoteBackend, make_backend
from typed_decisions.errors import (AuthenticationError, EngineError, InvalidRequestError,
                                    ModelNotFoundError, RateLimitedError, ServerBusyError,
                                    TypedDecisionsError, UnavailableError)
from typed_decisions.schema import DecisionResponse, NoulAnswer, Usage

URGENT = {"type": "noul", "instructions": "Urgent?"}


class EchoDecider:
    """The Decider's interface; P(yes) = 0.9 when the state says "urgent", else 0.2."""

    def __init__(self, name: str = "fake"):
        self.name = name
        self.calls: list[int] = []  # size of each run_many call

    def run_many(self, requests: Sequence[Any]) -> list[DecisionResponse]:
        self.calls.append(len(requests))
        return [DecisionResponse(model=r.get("model") or self.name,
                                 answers={q: NoulAnswer(noul=0.9 if "urgent" in r["state"] else 0.2)
                                          for q in r["questions"]},
                                 usage=Usage(input_tokens=len(r["state"].split())))
                for r in requests]


def wire(state: str, model: str | None = "fake") -> dict[str, Any]:
    return {**({"model": model} if model else {}), "state": state, "questions": {"urgent": URGENT}}


def _refusal(error_type: str, message: str) -> dict[str, Any]:
    return {"detail": {"error_type": error_type, "message": message}}


def server(decider: EchoDecider, seen: list[httpx.Request], key: str = "k-1") -> httpx.MockTransport:
    """A System One server: 401 without the key; the state picks an error; else the decider's answer."""
    errors = {
        "bad": (422, {}, {"detail": [{"loc": ["body", "questions", "urgent", "instructions"],
                                      "msg": "is empty", "type": "invalid_request"},
                                     {"loc": ["body", "state"], "msg": "too long", "type": "x"}]}),
        # the server's shape for everything but a 422: {"detail": {"error_type", "message"}}
        "busy": (429, {"retry-after": "3"}, _refusal("server_busy_error", "queue full")),
        "limited": (429, {"retry-after": "2", "x-limit-hit": "key_concurrency"},
                    _refusal("rate_limited_error", "key_concurrency = 1 reached")),
        "loading": (503, {"retry-after": "5"}, _refusal("unavailable_error", "loading")),
        "unknown": (404, {}, _refusal("model_not_found_error", "model 'x' is not served here")),
        "crash": (500, {}, _refusal("internal_error", "internal error; the server log has the details")),
        "odd-type": (404, {}, _refusal("rate_limited_error", "no such thing")),  # the status wins
        # other servers' (and older typed-decisions') shapes still become one message
        "busy-date": (429, {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}, {"detail": []}),
        "loading-list": (503, {"retry-after": "5"}, {"detail": [{"loc": [], "msg": "loading"}]}),
        "unknown-text": (404, {}, {"detail": "model 'x' not found"}),
        "crash-list": (500, {}, {"detail": [{"loc": [], "msg": "onnxruntime failed"}]}),
        "gateway": (502, {}, None),
        "teapot": (418, {}, {"detail": [{"loc": [], "msg": "short and stout"}]}),
    }

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.headers.get("authorization") != f"Bearer {key}":
            return httpx.Response(401, json=_refusal("authentication_error", "unknown key"))
        body = json.loads(request.content)
        if body["state"] in errors:
            status, headers, payload = errors[body["state"]]
            if payload is None:
                return httpx.Response(status, headers=headers, text="Bad Gateway from the proxy")
            return httpx.Response(status, headers=headers, json=payload)
        return httpx.Response(200, json=decider.run_many([body])[0].model_dump(mode="json"))
    return httpx.MockTransport(handle)


@pytest.fixture
def remote() -> tuple[RemoteBackend, EchoDecider, list[httpx.Request]]:
    decider, seen = EchoDecider(), []
    backend = RemoteBackend("http://td.test/", "fake", api_key="k-1",
                            client_kwargs={"transport": server(decider, seen)})
    yield backend, decider, seen
    backend.close()


# -- LocalBackend


def test_local_backend_is_one_engine_call() -> None:
    decider = EchoDecider()
    backend = LocalBackend(decider)
    assert isinstance(backend, Backend) and backend.name == "fake"
    out = backend.run_many([wire("urgent: the site is down"), wire("a question")])
    assert [r.answers["urgent"].noul for r in out] == [0.9, 0.2] and decider.calls == [2]
    assert backend.run_many([]) == [] and decider.calls == [2]     # no engine call for nothing
    assert asyncio.run(backend.arun_many([wire("urgent")])) == backend.run_many([wire("urgent")])
    assert repr(backend) == "LocalBackend(model='fake')"


def test_local_cache_key_names_what_changes_answers() -> None:
    decider = EchoDecider()
    assert LocalBackend(decider).cache_key == {"export": "", "label_mode": None, "confidence": None,
                                               "calibration": None}
    decider.artifacts = type("A", (), {"root": Path("/exports/tiny")})()
    decider.label_mode, decider.confidence_kind = "letters", "entropy"
    decider.calibration = type("C", (), {"model": "tiny", "version": 1})()
    assert LocalBackend(decider).cache_key == {"export": "/exports/tiny", "label_mode": "letters",
                                               "confidence": "entropy", "calibration": "tiny@v1"}


def test_local_backend_from_an_export_path_loads_it_once(tiny_model_dir, tiny_decider) -> None:
    by_str = LocalBackend(str(tiny_model_dir))
    by_path = make_backend(decider=Path(tiny_model_dir))
    assert isinstance(by_path, LocalBackend) and by_path.decider is by_str.decider
    assert by_str.name == tiny_decider.name
    req = {"model": by_str.name, "state": "The site is down.", "questions": {"urgent": URGENT}}
    (got,) = by_str.run_many([req])
    assert got == tiny_decider.run_many([req])[0]


def test_local_backend_from_a_catalogue_name(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """``decider="tiny"`` (LangChain's and DSPy's ``decider=`` too) finds the cached export."""
    import shutil

    from typed_decisions.errors import ArtifactError
    from typed_decisions.exports import export_dir

    monkeypatch.setenv("TYPED_DECISIONS_CACHE", str(tmp_path))
    with pytest.raises(ArtifactError, match="typed-decisions export smollm2-135m --out"):
        make_backend(decider="tiny")
    shutil.copytree(tiny_model_dir, export_dir("tiny"))
    by_name = make_backend(decider="tiny")
    by_alias = LocalBackend("smollm2-135m")
    assert by_name.decider is by_alias.decider            # one engine per export, whatever its name
    assert by_name.decider.artifacts.root == export_dir("tiny").resolve()


# -- RemoteBackend


def test_remote_request_on_the_wire(remote) -> None:
    backend, decider, seen = remote
    assert isinstance(backend, Backend) and backend.url == "http://td.test/v1/systemone"
    out = backend.run_many([wire("urgent"), wire("calm", model=None)])
    assert out == LocalBackend(decider).run_many([wire("urgent"), wire("calm")])
    assert [str(r.url) for r in seen] == ["http://td.test/v1/systemone"] * 2
    assert json.loads(seen[1].content) == wire("calm")             # the model filled in
    assert all(r.headers["authorization"] == "Bearer k-1" for r in seen)
    assert asyncio.run(backend.arun_many([wire("urgent"), wire("calm")])) == out
    assert backend.run_many([]) == []


def test_remote_key_from_environment_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(client.API_KEY_ENV, "k-env")
    decider, seen = EchoDecider(), []
    backend = RemoteBackend("http://td.test", "fake", client_kwargs={"transport": server(decider, seen, "k-env")})
    assert backend.run_many([wire("urgent")])[0].answers["urgent"].noul == 0.9
    assert "k-env" not in repr(backend) and "k-env" not in json.dumps(backend.cache_key)
    assert backend.cache_key == {"base_url": "http://td.test"}
    monkeypatch.delenv(client.API_KEY_ENV)
    with pytest.raises(AuthenticationError, match="check api_key= or the TYPED_DECISIONS_API_KEY"):
        RemoteBackend("http://td.test", "fake", client_kwargs={"transport": server(decider, seen)}
                      ).run_many([wire("x")])


def test_422_becomes_invalid_request_with_field_paths(remote) -> None:
    backend, _, _ = remote
    with pytest.raises(InvalidRequestError) as e:
        backend.run_many([wire("bad")])
    assert e.value.loc == ("questions", "urgent", "instructions") and e.value.msg == "is empty"
    assert e.value.errors == [(("questions", "urgent", "instructions"), "is empty"), (("state",), "too long")]


@pytest.mark.parametrize("state, cls, message, retry", [
    ("busy", ServerBusyError, "server answered 429: queue full", 3.0),
    ("limited", RateLimitedError, "server answered 429: key_concurrency = 1 reached", 2.0),
    ("loading", UnavailableError, "server answered 503: loading", 5.0),
    ("unknown", ModelNotFoundError, "server answered 404: model 'x' is not served here", None),
    ("crash", EngineError, "server answered 500: internal error; the server log has the details", None),
    ("odd-type", ModelNotFoundError, "server answered 404: no such thing", None),
    ("busy-date", ServerBusyError, "server answered 429", 1.0),
    ("loading-list", UnavailableError, "server answered 503: loading", 5.0),
    ("unknown-text", ModelNotFoundError, "server answered 404: model 'x' not found", None),
    ("crash-list", EngineError, "server answered 500: onnxruntime failed", None),
    ("gateway", EngineError, "server answered 502: Bad Gateway from the proxy", None),
    ("teapot", TypedDecisionsError, "server answered 418: short and stout", None),
])
def test_http_errors_become_runtime_errors(remote, state, cls, message, retry) -> None:
    backend, _, _ = remote
    with pytest.raises(TypedDecisionsError) as e:
        asyncio.run(backend.arun_many([wire("fine"), wire(state)]))
    assert type(e.value) is cls and str(e.value).startswith(message), (type(e.value), str(e.value))
    if retry is not None:
        assert e.value.retry_after_s == retry
    if cls is RateLimitedError:
        assert e.value.limit == "key_concurrency"


def test_remote_close_reopens(remote) -> None:
    backend, _, _ = remote
    backend.run_many([wire("a")])
    backend.close()
    backend.close()                                                  # idempotent
    assert len(backend.run_many([wire("a")])) == 1


def test_remote_without_httpx_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ImportError, match="pip install httpx"):
        RemoteBackend("http://td.test", "fake")


# -- make_backend


def test_make_backend_builds_each_kind() -> None:
    decider = EchoDecider()
    local = make_backend(decider=decider)
    assert isinstance(local, LocalBackend) and local.decider is decider
    assert make_backend(decider=local) is local                      # a ready backend is shared
    remote = make_backend(base_url="http://td.test/", model="m", api_key="k", timeout=5.0)
    assert isinstance(remote, RemoteBackend) and remote.timeout == 5.0 and remote.name == "m"
    assert repr(remote) == "RemoteBackend(base_url='http://td.test', model='m')"


@pytest.mark.parametrize("kwargs, error, match", [
    ({}, ValueError, r"exactly one of decider= .* and base_url="),
    ({"decider": "d", "base_url": "http://x"}, ValueError, "exactly one"),
    ({"base_url": "http://x"}, ValueError, "remote mode needs model="),
    ({"decider": EchoDecider(), "model": "m"}, ValueError, r"apply to remote mode \(base_url=\) only"),
    ({"decider": EchoDecider(), "api_key": "k"}, ValueError, "apply to remote mode"),
    ({"decider": EchoDecider(), "client_kwargs": {"proxy": "x"}}, ValueError, "apply to remote mode"),
    ({"decider": 3}, TypeError, "decider= must be a typed_decisions Decider, .* not int"),
])
def test_make_backend_refuses_bad_combinations(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        make_backend(**kwargs)
