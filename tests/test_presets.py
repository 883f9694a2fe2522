"""typed_decisions/presets/: shipped presets load and match their registered version hashes (an edit without a
version bump fails here), the acting policy, answer_preset and `eval --preset` on the tiny model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions import presets
from typed_decisions.errors import InvalidRequestError
from typed_decisions.presets import PresetError, content_hash, decide_action, load_preset, store


def test_the_old_import_path_is_the_same_objects():
    """``typed_decisions.evaluation.presets`` was the documented import before the move (issue #30):
    it still answers, with the very objects of ``typed_decisions.presets`` (nothing of its own)."""
    import typed_decisions.evaluation as evaluation
    from typed_decisions.evaluation import presets as old

    assert set(old.__all__) == set(presets.__all__)
    assert all(getattr(old, name) is getattr(presets, name) for name in presets.__all__)
    assert evaluation.load_preset is presets.load_preset and evaluation.answer_preset is presets.answer_preset
    assert [p.name for p in store._folder().glob("_registry.json")] == ["_registry.json"]


def test_every_shipped_preset_matches_its_registered_version():
    registry = json.loads((store._folder() / presets.REGISTRY).read_text())
    names = presets.list_presets()
    assert {"support-ticket-routing", "sms-spam", "sentiment-score"} <= set(names)
    assert set(registry) == set(names), "every preset file needs registry entries, and vice versa"
    for name in names:
        data = json.loads((store._folder() / f"{name}.json").read_text())
        assert registry[name].get(str(data["version"])) == content_hash(data), (
            f"{name}.json changed without a version bump: bump 'version' and add "
            f"`typed-decisions presets hash {name}` to typed_decisions/presets/data/_registry.json")
        preset = load_preset(name)
        assert preset.name == name and preset.question_spec().type == preset.question.type


def test_an_edit_without_a_version_bump_is_refused(shipped):
    folder = shipped
    data = json.loads((folder / "sms-spam.json").read_text())
    data["question"]["instructions"] = "Is this message junk?"
    (folder / "sms-spam.json").write_text(json.dumps(data))
    with pytest.raises(PresetError, match=f"version {data['version']} does not match"):
        load_preset("sms-spam")
    data["version"] += 1  # bumped but not registered: still refused, with the fix named
    (folder / "sms-spam.json").write_text(json.dumps(data))
    with pytest.raises(PresetError, match="none registered.*presets hash sms-spam"):
        load_preset("sms-spam")
    with pytest.raises(PresetError, match="unknown preset"):
        load_preset("nope")


def test_policy_thresholds_and_never_auto():
    spam = load_preset("sms-spam")  # yes needs 0.95, no needs 0.8
    assert decide_action(spam, np.array([0.96, 0.04]))["auto"] is True
    assert decide_action(spam, np.array([0.9, 0.1]))["auto"] is False
    assert decide_action(spam, np.array([0.15, 0.85]))["auto"] is True
    routing = load_preset("support-ticket-routing")
    p = np.array([0.01, 0.01, 0.01, 0.01, 0.01, 0.95])  # legal wins, confidently
    act = decide_action(routing, p)
    assert act["option"] == "legal" and act["auto"] is False and "never" in act["reason"]
    p = np.array([0.85, 0.03, 0.03, 0.03, 0.03, 0.03])
    assert decide_action(routing, p)["auto"] is True
    assert decide_action(routing, p, threshold=0.9)["auto"] is False  # a stricter caller


def test_answer_preset_on_the_tiny_model(tiny_decider):
    out = presets.answer_preset(tiny_decider, "support-ticket-routing",
                                "I was charged twice this month, please refund me.", {"threshold": 0.5})
    assert out["preset"] == "support-ticket-routing" and out["preset_version"] == 1
    team = out["answers"]["team"]
    assert team["type"] == "choice" and out["act"]["option"] == team["choice"]
    assert out["act"]["probability"] == pytest.approx(max(team["probabilities"].values()))
    noul = presets.answer_preset(tiny_decider, "sms-spam", "WIN a free phone now! Text WIN to 80082")
    assert noul["act"]["option"] in ("yes", "no") and 0 <= noul["answers"]["spam"]["noul"] <= 1
    with pytest.raises(InvalidRequestError, match="unknown preset params"):
        presets.answer_preset(tiny_decider, "sms-spam", "hi", {"temperature": 0.7})
    with pytest.raises(InvalidRequestError, match="unknown preset"):  # names only, never a path
        presets.answer_preset(tiny_decider, str(store._folder() / "sms-spam.json"), "hi")


def test_eval_on_a_preset_records_its_version(tiny_model_dir, tmp_path):
    from typed_decisions.cli import main

    data, out = tmp_path / "s.jsonl", tmp_path / "r.json"
    rows = [{"state": "I love it, best day ever!", "gold": "very positive"}, {"state": "Meh.", "gold": "neutral"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "--model", str(tiny_model_dir), "--preset", "sentiment-score", "--data", str(data),
                 "--split", "all", "--threads", str(THREADS), "--out", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())
    assert rep["preset"] == {"name": "sentiment-score", "version": load_preset("sentiment-score").version}
    assert rep["question"]["type"] == "score" and rep["n"] == 2 and "mae" in rep["metrics"]


def test_preset_debias_param_goes_into_the_request():
    from typed_decisions.errors import InvalidRequestError
    from typed_decisions.presets import list_presets, prepare_preset

    name = list_presets()[0]
    call = prepare_preset("m", name, "some state", {"debias": "rotate"})
    assert call.request["debias"] == "rotate"
    assert "debias" not in prepare_preset("m", name, "some state").request
    with pytest.raises(InvalidRequestError, match="params.debias"):
        prepare_preset("m", name, "s", {"debias": "both"})


# --- few-shot presets (issue #14, lever 6) ----------------------------------------------------------
SPAM_SHOTS = [{"state": "WINNER!! Claim your free prize now, call 09061701461", "answer": "yes"},
              {"state": "Are we still on for lunch tomorrow?", "answer": "no"}]


@pytest.fixture
def fewshot_presets(tmp_path, monkeypatch):
    """The shipped presets plus 'sms-spam-fewshot' (sms-spam with two examples) and a score preset
    with one, registered in a copy of the registry, as a release would."""
    folder = tmp_path / "presets"
    folder.mkdir()
    for p in store._folder().glob("*.json"):
        (folder / p.name).write_text(p.read_text())
    registry = json.loads((folder / presets.REGISTRY).read_text())
    spam = json.loads((folder / "sms-spam.json").read_text())
    sent = json.loads((folder / "sentiment-score.json").read_text())
    spam.pop("calibration", None)  # fitted without examples: a preset may not carry both
    sent.pop("calibration", None)
    new = {"sms-spam-fewshot": {**spam, "name": "sms-spam-fewshot", "examples": SPAM_SHOTS},
           "sentiment-fewshot": {**sent, "name": "sentiment-fewshot",
                                 "examples": [{"state": "Meh.", "answer": sent["question"]["options"][2]["name"]}]}}
    for name, data in new.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
        registry[name] = {str(data["version"]): content_hash(data)}
    (folder / presets.REGISTRY).write_text(json.dumps(registry))
    monkeypatch.setattr(store, "_folder", lambda: folder)
    return folder


def test_preset_examples_go_into_the_wire_request(fewshot_presets):
    from typed_decisions.decider import parse_request
    from typed_decisions.presets import prepare_preset

    call = prepare_preset("m", "sms-spam-fewshot", "Free entry in 2 a wkly comp")
    assert call.request["examples"] == [{"state": s["state"], "answers": {"spam": s["answer"]}} for s in SPAM_SHOTS]
    assert len(parse_request(call.request).examples) == 2
    # a score preset's example answers by level number, as the wire format does
    (ex,) = prepare_preset("m", "sentiment-fewshot", "x").request["examples"]
    assert ex == {"state": "Meh.", "answers": {"sentiment": "2"}}
    assert "examples" not in prepare_preset("m", "sms-spam", "x").request  # shipped presets: unchanged


def test_a_preset_example_must_answer_an_option(fewshot_presets):
    data = json.loads((fewshot_presets / "sms-spam-fewshot.json").read_text())
    with_cal = {**data, "calibration": json.loads((store._folder() / "sms-spam.json").read_text())["calibration"]}
    (fewshot_presets / "both.json").write_text(json.dumps(with_cal))
    with pytest.raises(PresetError, match=r"calibration\.\S+\.examples: fitted without examples, but the preset "
                                          r"has examples sha256:[0-9a-f]{16}; refit with typed-decisions calibrate"):
        load_preset(str(fewshot_presets / "both.json"))
    # a fit read after these very examples is accepted; after other examples, or on a preset without any, refused
    own = presets.examples_hash(load_preset(str(fewshot_presets / "sms-spam-fewshot.json")).examples)
    for cal in with_cal["calibration"].values():
        cal["examples"] = own
    (fewshot_presets / "both.json").write_text(json.dumps(with_cal))
    assert load_preset(str(fewshot_presets / "both.json")).calibration
    other = {**with_cal, "examples": SPAM_SHOTS[:1]}
    (fewshot_presets / "other.json").write_text(json.dumps(other))
    with pytest.raises(PresetError, match=f"fitted with examples {own}, but the preset has examples sha256:"):
        load_preset(str(fewshot_presets / "other.json"))
    (fewshot_presets / "none.json").write_text(json.dumps({**with_cal, "examples": []}))
    with pytest.raises(PresetError, match=f"fitted with examples {own}, but the preset has none"):
        load_preset(str(fewshot_presets / "none.json"))
    data["examples"][1]["answer"] = "maybe"
    path = fewshot_presets / "mine.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PresetError, match=r"examples\.1\.answer: 'maybe' is not an option"):
        load_preset(str(path))
    data["examples"][1] = {"state": "x"}
    path.write_text(json.dumps(data))
    with pytest.raises(PresetError, match=r"examples\.1\.answer: Field required"):
        load_preset(str(path))


def test_answer_preset_with_examples_on_the_tiny_model(fewshot_presets, tiny_decider):
    from fastapi.testclient import TestClient

    from typed_decisions.server import ServerSettings, create_app

    state = "URGENT you have won a 1 week FREE membership, text CLAIM to 87121"
    out = presets.answer_preset(tiny_decider, "sms-spam-fewshot", state)
    spec = load_preset("sms-spam").question_spec()
    shots = [{"state": s["state"], "answers": {"spam": s["answer"]}} for s in SPAM_SHOTS]
    want = tiny_decider.run({**spec.request(tiny_decider.name, state), "examples": shots}).answers["spam"].noul
    without = tiny_decider.run(spec.request(tiny_decider.name, state)).answers["spam"].noul
    assert out["answers"]["spam"]["noul"] == pytest.approx(want, abs=1e-6)
    assert abs(want - without) > 1e-4  # the examples are in the prompt
    with TestClient(create_app(tiny_decider, settings=ServerSettings())) as client:
        r = client.post("/v1/presets/sms-spam-fewshot", json={"state": state})
    assert r.status_code == 200, r.text
    assert r.json()["answers"]["spam"]["noul"] == pytest.approx(want, abs=1e-6)
