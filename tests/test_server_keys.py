"""API keys (typed_decisions.server.keys) and the loopback-only default (settings.check_exposure).

The keys file is checked against an independent computation of its digest (sha256 of salt ‖ key,
from the line's own fields); the key itself must appear nowhere the server writes: the file, the
log, the audit log, /metrics.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import stat
from pathlib import Path

import pytest

from td_optional import require  # noqa: E402

require("fastapi", "pip install 'typed-decisions-runtime[server]'")

from fastapi.testclient import TestClient  # noqa: E402
from starlette.requests import Request  # noqa: E402

import td_fakes  # noqa: E402
from typed_decisions.cli import main as cli  # noqa: E402
from typed_decisions.errors import AuthenticationError  # noqa: E402
from typed_decisions.server import ApiKey, ServerSettings, create_app, load_api_keys  # noqa: E402
from typed_decisions.server import keys as keys_module  # noqa: E402
from typed_decisions.server.main import main as serve_main  # noqa: E402
from typed_decisions.server.settings import check_exposure, is_loopback  # noqa: E402

REQUEST = {"model": "fake-model", "state": "I was charged twice; please refund one payment.",
           "questions": {"urgent": {"type": "noul", "instructions": "Is it urgent?"}}}


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _add(path: Path, name: str, capsys, *extra: str) -> str:
    assert cli(["keys", "add", name, "--file", str(path), *extra]) == 0
    out = capsys.readouterr()
    (key,) = out.out.split()
    assert "one time the key is shown" in out.err and key not in out.err
    return key


def test_keys_add_prints_once_and_stores_only_a_salted_hash(tmp_path, capsys):
    path = tmp_path / "api-keys"
    alice = _add(path, "alice", capsys)
    bob = _add(path, "bob", capsys, "--rpm", "120", "--concurrency", "2")
    text = path.read_text()
    assert alice not in text and bob not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert alice.startswith("td-") and len(alice) == 3 + 43 and alice != bob
    lines = [ln.split() for ln in text.splitlines() if not ln.startswith("#")]
    assert [ln[0] for ln in lines] == ["alice", "bob"] and lines[1][2:] == ["concurrency=2", "rpm=120"]
    for (name, hashed, *_), key in zip(lines, (alice, bob)):
        scheme, salt, digest = hashed.split("$")
        assert scheme == "sha256" and len(_unb64(salt)) == 16
        assert _unb64(digest) == hashlib.sha256(_unb64(salt) + key.encode()).digest()  # the oracle
    a, b = load_api_keys(path)
    assert a.salt != b.salt and (b.max_concurrent, b.requests_per_minute) == (2, 120)
    assert a.matches(alice) and not a.matches(bob) and not a.matches(alice + "x") and not a.matches("")

    assert cli(["keys", "list", "--file", str(path)]) == 0
    listed = capsys.readouterr().out
    assert listed.split("\n")[:2] == ["alice", "bob  concurrency=2  rpm=120"] and "sha256" not in listed
    assert cli(["keys", "add", "alice", "--file", str(path)]) == 2
    assert "already has a key named 'alice'" in capsys.readouterr().err
    assert cli(["keys", "add", "no spaces", "--file", str(path)]) == 2
    assert cli(["keys", "remove", "alice", "--file", str(path)]) == 0
    assert [k.id for k in load_api_keys(path)] == ["bob"]


def test_issued_keys_authenticate_and_never_appear_in_logs_metrics_or_audit(tmp_path, capsys, caplog):
    path, audit = tmp_path / "api-keys", tmp_path / "audit.jsonl"
    alice = _add(path, "alice", capsys)
    settings = ServerSettings(api_keys=load_api_keys(path), audit_log=audit)
    with caplog.at_level(logging.DEBUG), TestClient(create_app(td_fakes.FakeDecider("fake-model"),
                                                               settings=settings)) as c:
        auth = {"Authorization": f"Bearer {alice}"}
        assert c.post("/v1/systemone", json=REQUEST, headers=auth).status_code == 200
        assert c.post("/v1/systemone", json={**REQUEST, "model": "x"}, headers=auth).status_code == 404
        wrong = c.post("/v1/systemone", json=REQUEST, headers={"Authorization": f"Bearer {alice[:-1]}"})
        assert wrong.status_code == 401 and wrong.json()["detail"]["error_type"] == "authentication_error"
        assert c.get("/metrics").status_code == 401  # the per-key counters name the keys
        metrics = c.get("/metrics", headers=auth).text
    records = [json.loads(ln) for ln in audit.read_text().splitlines()]
    assert [(r["key"], r["caller"], r["status"]) for r in records] == [("alice", "alice", 200),
                                                                       ("alice", "alice", 404)]
    assert 'typed_decisions_key_requests_total{key="alice",status="200"} 1.0' in metrics
    for text in (audit.read_text(), metrics, caplog.text, path.read_text()):
        assert alice not in text and alice[3:20] not in text


def test_every_record_is_compared_in_constant_time(monkeypatch):
    """``find_key`` compares every record (no early exit) and with ``hmac.compare_digest``."""
    records = [ApiKey.hash(f"td-key-{i}", f"k{i}") for i in range(5)]
    compared = []
    real = keys_module.hmac.compare_digest
    monkeypatch.setattr(keys_module.hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    assert keys_module.find_key(records, "td-key-0").id == "k0"
    assert len(compared) == 5
    assert keys_module.find_key(records, "td-key-9") is None and len(compared) == 10


def test_plaintext_key_files_still_load_hashed_with_a_warning(tmp_path, caplog):
    path = tmp_path / "old-keys"
    path.write_text("ops sk-ops-1\nsk-unnamed\n")
    with caplog.at_level(logging.WARNING):
        records = load_api_keys(path)
    assert [r.id for r in records] == ["ops", "line-2"] and records[1].matches("sk-unnamed")
    assert "plaintext keys (lines 1, 2)" in caplog.text and "sk-ops-1" not in caplog.text
    assert "sk-ops-1" not in ServerSettings(api_keys=records).model_dump_json()
    path.write_text("ops sha256$AAAA$BBBB speed=3\n")
    with pytest.raises(ValueError, match="unknown field 'speed=3'"):
        load_api_keys(path)


# --------------------------------------------------------------------------- loopback only, unless told


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_keys(host):
    assert is_loopback(host)
    check_exposure(host, ServerSettings())


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.org", ""])
def test_non_loopback_without_keys_is_refused_unless_allowed(host):
    assert not is_loopback(host)
    with pytest.raises(ValueError, match="--allow-anonymous"):
        check_exposure(host, ServerSettings())
    check_exposure(host, ServerSettings(allow_anonymous=True))
    check_exposure(host, ServerSettings.from_env({"TYPED_DECISIONS_ALLOW_ANONYMOUS": "1"}))
    check_exposure(host, ServerSettings(api_keys={"sk-1": "ops"}))


def test_serve_refuses_to_start_on_0000_without_keys(capsys, monkeypatch):
    monkeypatch.delenv("TYPED_DECISIONS_API_KEYS", raising=False)
    monkeypatch.delenv("TYPED_DECISIONS_API_KEYS_FILE", raising=False)
    monkeypatch.delenv("TYPED_DECISIONS_ALLOW_ANONYMOUS", raising=False)
    # refused before the model is even looked up (the directory does not exist)
    assert serve_main(["--model", "/nonexistent/model", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on '0.0.0.0' without API keys" in err and "keys add" in err


def _request_to(host: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/v1/models", "headers": [],
                    "server": (host, 8000), "client": ("203.0.113.9", 5000), "query_string": b""})


def test_anonymous_server_answers_loopback_only_whatever_started_it():
    """A guard beside the start-up check: an app embedded in another server, bound to a public
    address without keys, still refuses callers that reached that address."""
    strict = create_app(td_fakes.FakeDecider()).state.service
    assert strict.authenticate(_request_to("127.0.0.1")).key_id == "anonymous"
    with pytest.raises(AuthenticationError, match="loopback only"):
        strict.authenticate(_request_to("192.0.2.10"))
    loose = create_app(td_fakes.FakeDecider(), settings=ServerSettings(allow_anonymous=True)).state.service
    assert loose.authenticate(_request_to("192.0.2.10")).key_id == "anonymous"


def test_allow_anonymous_is_loud_at_start_and_on_models(caplog):
    with caplog.at_level(logging.WARNING, logger="typed_decisions.server"), TestClient(
            create_app(td_fakes.FakeDecider(), settings=ServerSettings(allow_anonymous=True))) as c:
        body = c.get("/v1/models").json()
    assert "ANONYMOUS ACCESS" in caplog.text and "ANONYMOUS ACCESS" in body["warning"]
    with TestClient(create_app(td_fakes.FakeDecider(), settings=ServerSettings(api_keys={"k": "a"}))) as c:
        assert "warning" not in c.get("/v1/models", headers={"Authorization": "Bearer k"}).json()
