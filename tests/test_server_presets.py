"""The preset endpoints: a separate route, so /v1/systemone stays the strict System One format."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

from typed_decisions.presets import decide_action, list_presets, load_preset
from typed_decisions.server import ServerSettings, create_app

AUTH = {"Authorization": "Bearer test-key"}


def test_list_and_answer_a_preset(tiny_decider):
    with TestClient(create_app(tiny_decider, settings=ServerSettings())) as client:
        listed = client.get("/v1/presets", headers=AUTH).json()["presets"]
        assert sorted(p["name"] for p in listed) == sorted(list_presets())
        preset = load_preset("sms-spam")
        r = client.post("/v1/presets/sms-spam", headers=AUTH,
                        json={"state": "WINNER!! Claim your free prize now, call 09061701461"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["preset"] == "sms-spam" and body["preset_version"] == preset.version
        (answer,) = body["answers"].values()
        assert answer["type"] == "noul" and 0 <= answer["noul"] <= 1
        expected = decide_action(preset, np.array([answer["noul"], 1 - answer["noul"]]))
        assert body["act"] == expected
        assert r.headers["x-typesafe-request-id"]


def test_preset_errors_are_422_with_the_field(tiny_decider):
    with TestClient(create_app(tiny_decider, settings=ServerSettings())) as client:
        r = client.post("/v1/presets/no-such-preset", headers=AUTH, json={"state": "x"})
        assert r.status_code == 422 and "unknown preset" in r.text
        r = client.post("/v1/presets/sms-spam", headers=AUTH, json={"state": "x", "params": {"temperature": 1}})
        assert r.status_code == 422 and "temperature" in r.text
        r = client.post("/v1/presets/sms-spam", headers=AUTH, json={"state": "x", "extra": 1})
        assert r.status_code == 422
