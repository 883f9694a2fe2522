"""Presets carrying calibrations fitted per model (#14 lever 5): parsing, which calibration applies
(precedence), the applied maths against hand-computed values, the server endpoint, and the
`calibrate --to-preset` / `presets register` path. The tiny model stands in for the default one."""

from __future__ import annotations

from typed_decisions.settings import Settings

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions.answers import answer_question
from typed_decisions.calibration import CalibrationFile, TypeCalibration
from typed_decisions.errors import InvalidRequestError
from typed_decisions import presets
from typed_decisions.presets import (DeciderSettings, Preset, PresetCalibration, PresetError, load_preset,
                                                prepare_preset, register_preset, select_calibration, with_calibration)
from typed_decisions.reducers import DEFAULT_CONFIDENCE, confidence
from typed_decisions.schema import DecisionResponse, Usage

NOUL = {"name": "spam", "type": "noul", "instructions": "Spam?",
        "options": [{"name": "yes", "threshold": 0.95}, {"name": "no", "threshold": 0.8}]}
CHOICE = {"name": "team", "type": "choice", "instructions": "Which team?",
          "options": [{"name": "billing"}, {"name": "tech"}, {"name": "legal", "never_auto": True}]}
SCORE = {"name": "mood", "type": "score", "instructions": "How positive?",
         "options": [{"name": "low", "description": "negative"}, {"name": "mid", "description": "neutral"},
                     {"name": "high", "description": "positive"}]}


def _preset(question=NOUL, calibration=None, version=1):
    data = {"name": "p", "version": version, "question": question, "policy": {"threshold": 0.8}}
    if calibration is not None:
        data["calibration"] = calibration
    return data


# -----------------------------------------------------------------------------
# parsing: errors name the field


@pytest.mark.parametrize("entry, where, why", [
    ({"temperature": 0, "labels": "names"}, "calibration.m.temperature", "greater than 0"),
    ({"temperature": "hot", "labels": "names"}, "calibration.m.temperature", "number"),
    ({"temperature": 1.2}, "calibration.m.labels", "required"),
    ({"temperature": 1.2, "labels": "auto"}, "calibration.m.labels", "names"),  # resolved modes only
    ({"temperature": 1.2, "labels": "names", "per_type": {}}, "calibration.m.per_type", "Extra inputs"),
    ({"labels": "names", "contextual": True, "content_free_state": "N/A"}, "calibration.m", "give content_free"),
    ({"labels": "names", "content_free": [0.5, 0.5]}, "calibration.m", "only used when contextual"),
    ({"labels": "names", "contextual": True, "content_free_state": "N/A", "content_free": [1.0, 0.0]},
     "calibration.m", "> 0"),
    ({"labels": "names", "contextual": True, "content_free_state": "N/A", "content_free": [0.2, 0.3, 0.5]},
     "calibration.m.content_free has 3 entries", "2 options"),
    ({"labels": "names", "fitted": {"rows": 10, "method": "magic"}}, "calibration.m.fitted.method", "temperature"),
])
def test_a_bad_calibration_entry_is_refused_naming_the_field(tmp_path, entry, where, why):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_preset(calibration={"m": entry})))
    with pytest.raises(PresetError) as e:
        load_preset(path)
    assert where in str(e.value) and why in str(e.value), str(e.value)


def test_an_empty_model_name_is_refused(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_preset(calibration={"": {"labels": "names"}})))
    with pytest.raises(PresetError, match="model names must be non-empty"):
        load_preset(path)


def test_a_valid_entry_parses_and_reuses_type_calibration():
    p = Preset.model_validate(_preset(CHOICE, {"m": {
        "temperature": 0.5, "contextual": True, "labels": "names", "content_free_state": "N/A",
        "content_free": [0.5, 0.25, 0.25], "fitted": {"dataset": "d", "rows": 100, "method": "combined"}}}))
    cal = p.calibration["m"]
    assert isinstance(cal, TypeCalibration) and cal.debias == "none" and cal.wording == "default"
    assert cal.fitted.split == "calibration" and p.calibration["m"].describe() == "T=0.5, contextual"


# -----------------------------------------------------------------------------
# which calibration applies


def test_precedence_and_what_the_answer_says():
    p = Preset.model_validate(_preset(NOUL, {"m": {"temperature": 0.25, "labels": "names"}}))
    cal, note = select_calibration(p, DeciderSettings("m"), labels="names", debias="none")
    assert cal is p.calibration["m"] and note == "preset p v1 for m: T=0.25"
    # a model without an entry: uncalibrated, and says so
    cal, note = select_calibration(p, DeciderSettings("other"), labels="names", debias="none")
    assert cal is None and note == "none: preset p v1 has no calibration for other (fitted for: m)"
    # the call opts out
    cal, note = select_calibration(p, DeciderSettings("m"), labels="names", debias="none", wanted=False)
    assert cal is None and "params.calibration" in note
    # the Decider's own file wins, even when it has no entry for this type (never stacked)
    own = CalibrationFile(model="m", created="2026-01-01", per_type={"noul": TypeCalibration(temperature=2.0)})
    cal, note = select_calibration(p, DeciderSettings("m", Settings(calibration=own)), labels="names", debias="none")
    assert cal is None and note.startswith("decider file m@v1: T=2 ") and "wins over preset p v1" in note
    other = CalibrationFile(model="m", created="2026-01-01", per_type={"choice": TypeCalibration(temperature=2.0)})
    cal, note = select_calibration(p, DeciderSettings("m", Settings(calibration=other)), labels="names", debias="none")
    assert cal is None and "no entry for noul questions, uncalibrated" in note
    # fitted under another reading of the question: not applied
    for settings, labels, debias in [(DeciderSettings("m"), "letters", "none"), (DeciderSettings("m"), "names", "rotate"),
                                     (DeciderSettings("m", Settings(wording="terse")), "names", "none")]:
        cal, note = select_calibration(p, settings, labels=labels, debias=debias)
        assert cal is None and "names/none/default" in note and note.startswith("none:"), note


def test_an_int8_export_is_keyed_apart_from_its_float_model():
    from types import SimpleNamespace

    # an INT8 export reports its float model's name; its probabilities drift, so it has its own entry
    int8 = SimpleNamespace(name="m", artifacts=SimpleNamespace(quantization={"weight_type": "int8"}))
    fp32 = SimpleNamespace(name="m", artifacts=SimpleNamespace(quantization=None))
    assert DeciderSettings.of(int8).key == "m:int8" and DeciderSettings.of(fp32).key == "m"
    p = Preset.model_validate(_preset(NOUL, {"m": {"temperature": 0.25, "labels": "names"}}))
    assert prepare_preset("m", p, "s", decider=fp32).calibration is not None
    call = prepare_preset("m", p, "s", decider=int8)
    assert call.calibration is None and call.calibration_note == "none: preset p v1 has no calibration for m:int8 (fitted for: m)"
    p8 = Preset.model_validate(_preset(NOUL, {"m:int8": {"temperature": 0.5, "labels": "names"}}))
    assert prepare_preset("m", p8, "s", decider=int8).calibration_note == "preset p v1 for m:int8: T=0.5"


def test_prepare_preset_resolves_the_reading_and_checks_the_param():
    p = Preset.model_validate(_preset(SCORE, {"m": {"temperature": 0.5, "labels": "letters"}}))
    assert prepare_preset("m", p, "s").calibration is not None  # auto reads a score with letters
    assert prepare_preset("m", p, "s", {"label_mode": "names"}).calibration is None
    assert prepare_preset("m", p, "s", decider=DeciderSettings("m", Settings(label_mode="names"))).calibration is None
    assert prepare_preset("m", p, "s", {"label_mode": "letters"},
                          decider=DeciderSettings("m", Settings(label_mode="names"))).calibration is not None
    with pytest.raises(InvalidRequestError, match="params.calibration must be 'preset' or 'none'") as e:
        prepare_preset("m", p, "s", {"calibration": "file"})
    assert e.value.args  # the field travels with the error (422 on the server)


# -----------------------------------------------------------------------------
# the maths, against hand-computed values


class _Readout:
    """A readout that gives the probabilities a wire answer reports (the Decider's answer step
    reads only its question, probabilities and label mass)."""

    def __init__(self, answer):
        self.answer = answer

    @property
    def question(self):
        a = self.answer
        options = (["yes", "no"] if a["type"] == "noul" else list(a["probabilities"]))
        return SimpleNamespace(name=a["name"], type=a["type"], options=options, legend=a.get("legend", {}))

    def probabilities(self):
        a = self.answer
        return np.array([a["noul"], 1 - a["noul"]] if a["type"] == "noul" else list(a["probabilities"].values()))

    def mean_label_mass(self):
        return None


def _decided(call, answer):
    """``call.result`` of what a Decider answers when its readout gives ``answer``'s probabilities:
    the call's preset calibration (``call.heads``) applied in the answer step (answers.py)."""
    head = (call.heads or {}).get(answer["name"])
    got = answer_question(_Readout(answer), confidence=DEFAULT_CONFIDENCE, head=head)
    return call.result(DecisionResponse(model="m", answers={answer["name"]: got}, usage={"input_tokens": 1}))


def test_temperature_on_a_noul_answer_and_the_threshold_on_the_calibrated_p():
    p = Preset.model_validate(_preset(NOUL, {"m": {"temperature": 0.5, "labels": "names"}}))
    call = prepare_preset("m", p, "s")
    out = _decided(call, {"name": "spam", "type": "noul", "noul": 0.9})
    # T = 0.5 squares: .81 : .01 -> 81/82; raw 0.9 < 0.95 would ask a person, calibrated acts
    assert out["answers"]["spam"]["noul"] == pytest.approx(81 / 82, rel=1e-12)
    assert out["act"]["probability"] == pytest.approx(81 / 82) and out["act"]["auto"] is True
    assert out["calibration"] == "preset p v1 for m: T=0.5"
    raw = _decided(prepare_preset("m", p, "s", {"calibration": "none"}), {"name": "spam", "type": "noul", "noul": 0.9})
    assert raw["answers"]["spam"]["noul"] == 0.9 and raw["act"]["auto"] is False
    assert raw["calibration"] == "none: params.calibration is 'none'"


def test_contextual_then_temperature_on_a_choice_answer():
    p = Preset.model_validate(_preset(CHOICE, {"m": {"temperature": 2.0, "contextual": True, "labels": "names",
                                                     "content_free_state": "N/A", "content_free": [0.5, 0.25, 0.25]}}))
    out = _decided(prepare_preset("m", p, "s"), {
        "name": "team", "type": "choice", "choice": "billing", "confidence": 0.5,
        "probabilities": {"billing": 0.6, "tech": 0.3, "legal": 0.1}})
    # p / p_cf = (1.2, 1.2, 0.4) ∝ (3, 3, 1); T = 2 takes square roots: (√3, √3, 1) / (2√3 + 1)
    z = 2 * math.sqrt(3) + 1
    want = {"billing": math.sqrt(3) / z, "tech": math.sqrt(3) / z, "legal": 1 / z}
    got = out["answers"]["team"]
    assert got["probabilities"] == pytest.approx(want, rel=1e-12)
    assert got["choice"] == "billing"  # a tie: the first listed, as the decider's reducer
    assert got["confidence"] == pytest.approx(confidence(list(want.values())))
    assert out["act"]["probability"] == pytest.approx(math.sqrt(3) / z)
    assert out["calibration"] == "preset p v1 for m: T=2, contextual"


def test_temperature_on_a_score_answer_keeps_the_legend():
    p = Preset.model_validate(_preset(SCORE, {"m": {"temperature": 0.5, "labels": "letters"}}))
    legend = {"0": "negative", "1": "neutral", "2": "positive"}
    out = _decided(prepare_preset("m", p, "s"), {
        "name": "mood", "type": "score", "score": 1.1, "confidence": 0.3, "legend": legend,
        "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3}})
    w = np.array([0.04, 0.25, 0.09]) / 0.38  # squared, renormalised
    got = out["answers"]["mood"]
    assert [got["probabilities"][k] for k in "012"] == pytest.approx(w.tolist(), rel=1e-12)
    assert got["score"] == pytest.approx(float(w @ [0, 1, 2])) and got["legend"] == legend


# -----------------------------------------------------------------------------
# writing, registering, the hash check


def test_with_calibration_round_trips_and_register_ships_a_new_version(shipped):
    data = json.loads((shipped / "sms-spam.json").read_text())
    v = data["version"]  # 1 until calibrations are shipped (scripts/fit_preset_calibrations.sh)
    cal = PresetCalibration(temperature=0.22, labels="names",
                            fitted={"dataset": "sms-spam", "rows": 100, "method": "temperature"})
    bumped = with_calibration(data, "some-model", cal, bump=True)
    shipped_entries = set(data.get("calibration") or {})
    assert bumped["version"] == v + 1 and "some-model" not in (data.get("calibration") or {})  # input untouched
    again = with_calibration(bumped, "other-model", PresetCalibration(temperature=1.5, labels="names"))
    assert again["version"] == v + 1 and set(again["calibration"]) == shipped_entries | {"some-model", "other-model"}
    # adding a calibration to the shipped file without a bump is refused, like any edit
    edited = {**data, "calibration": again["calibration"]}
    (shipped / "sms-spam.json").write_text(json.dumps(edited))
    with pytest.raises(PresetError, match=f"version {v} does not match"):
        load_preset("sms-spam")
    with pytest.raises(PresetError, match="registered with another content hash"):
        register_preset(edited)
    # registered as version v + 1: loads by name, old versions' hashes kept
    before = json.loads((shipped / presets.REGISTRY).read_text())["sms-spam"]
    register_preset(again)
    registry = json.loads((shipped / presets.REGISTRY).read_text())
    assert registry["sms-spam"] == {**before, str(v + 1): presets.content_hash(again)}
    loaded = load_preset("sms-spam")
    assert loaded.version == v + 1 and loaded.calibration["some-model"] == cal
    call = prepare_preset("some-model", "sms-spam", "hello")
    assert call.calibration_note == f"preset sms-spam v{v + 1} for some-model: T=0.22"


# -----------------------------------------------------------------------------
# on the tiny model: answer_preset, the Decider's file, the server, the CLI


def test_answer_preset_applies_the_entry_for_the_deciders_model(tiny_decider, monkeypatch):
    cf = [0.7, 0.3]
    p = Preset.model_validate(_preset(NOUL, {tiny_decider.name: {
        "temperature": 0.4, "contextual": True, "labels": "names", "content_free_state": "N/A", "content_free": cf}}))
    state = "WINNER!! Claim your free prize now"
    raw = presets.answer_preset(tiny_decider, p, state, {"calibration": "none"})["answers"]["spam"]["noul"]
    out = presets.answer_preset(tiny_decider, p, state)
    q = np.array([raw / 0.7, (1 - raw) / 0.3]) ** (1 / 0.4)  # numpy oracle: divide, then power 1/T
    assert out["answers"]["spam"]["noul"] == pytest.approx(q[0] / q.sum(), rel=1e-9)
    assert out["calibration"] == f"preset p v1 for {tiny_decider.name}: T=0.4, contextual"
    # another model's entry only: uncalibrated, and the answer says so
    p2 = Preset.model_validate(_preset(NOUL, {"someone-else": p.calibration[tiny_decider.name].model_dump()}))
    out2 = presets.answer_preset(tiny_decider, p2, state)
    assert out2["answers"]["spam"]["noul"] == pytest.approx(raw, abs=1e-12)
    assert out2["calibration"].startswith(f"none: preset p v1 has no calibration for {tiny_decider.name}")
    # the Decider's own file wins: its numbers, not the preset's
    own = CalibrationFile(model=tiny_decider.name, created="2026-01-01", per_type={"noul": TypeCalibration(temperature=3.0)})
    monkeypatch.setattr(tiny_decider, "calibration", own)
    out3 = presets.answer_preset(tiny_decider, p, state)
    r = np.array([raw, 1 - raw]) ** (1 / 3.0)
    assert out3["answers"]["spam"]["noul"] == pytest.approx(r[0] / r.sum(), rel=1e-9)
    assert out3["calibration"].startswith(f"decider file {tiny_decider.name}@v1: T=3")


def test_the_server_returns_answer_presets_calibrated_numbers(tiny_decider, shipped):
    from fastapi.testclient import TestClient

    from typed_decisions.server import ServerSettings, create_app

    data = json.loads((shipped / "sms-spam.json").read_text())
    v = data["version"] + 1
    register_preset(with_calibration(data, tiny_decider.name, PresetCalibration(temperature=0.3, labels="names"),
                                     bump=True))
    state = "WINNER!! Claim your free prize now, call 09061701461"
    expected = presets.answer_preset(tiny_decider, "sms-spam", state)
    assert expected["calibration"] == f"preset sms-spam v{v} for {tiny_decider.name}: T=0.3"
    with TestClient(create_app(tiny_decider, settings=ServerSettings())) as client:
        r = client.post("/v1/presets/sms-spam", headers={"Authorization": "Bearer k"}, json={"state": state})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["calibration"] == expected["calibration"] and body["preset_version"] == v
        assert body["answers"]["spam"]["noul"] == pytest.approx(expected["answers"]["spam"]["noul"], abs=1e-9)
        assert body["act"]["auto"] == expected["act"]["auto"]
        r = client.post("/v1/presets/sms-spam", headers={"Authorization": "Bearer k"},
                        json={"state": state, "params": {"calibration": "both"}})
        assert r.status_code == 422 and "params.calibration" in r.text


def test_calibrate_to_preset_writes_a_preset_that_loads_and_ships(tiny_model_dir, tiny_decider, tmp_path, shipped,
                                                                 capsys):
    from typed_decisions.cli import main

    texts = ["WIN a free phone now! Text WIN to 80082", "Are we still on for lunch?", "URGENT! You have won £1000",
             "Call me when you get home", "Free entry in a weekly prize draw, txt NOW", "Running late, 10 min",
             "Claim your cash reward today, reply YES", "Thanks for dinner last night"]
    rows = [{"state": t, "gold": "yes" if i % 2 == 0 else "no"} for i, t in enumerate(texts)]
    v = load_preset("sms-spam").version + 1
    data, out = tmp_path / "spam.jsonl", tmp_path / "sms-spam.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["calibrate", "--model", str(tiny_model_dir), "--preset", "sms-spam", "--data", str(data),
                 "--method", "temperature", "--to-preset", str(out), "--threads", str(THREADS), "-q"]) == 0
    printed = capsys.readouterr().out
    assert "presets register" in printed and f"sms-spam v{v}" in printed
    written = load_preset(out)  # loads (your own file: unchecked) and has the entry
    assert written.version == v
    cal = written.calibration[tiny_decider.name]
    assert cal.labels == "names" and not cal.contextual and cal.fitted.method == "temperature"
    assert cal.fitted.rows + cal.fitted.test_rows == len(rows) and "--to-preset" in cal.fitted.command
    assert cal.fitted.test_nll_before is not None and cal.fitted.test_nll_after is not None
    # round trip: the written JSON re-serialises to the same content
    assert json.loads(out.read_text()) == with_calibration(json.loads(out.read_text()), tiny_decider.name, cal)
    assert main(["presets", "register", str(out)]) == 0
    answer = presets.answer_preset(tiny_decider, "sms-spam", texts[0])
    assert answer["calibration"] == f"preset sms-spam v{v} for {tiny_decider.name}: T={cal.temperature:g}"


def test_calibrate_a_preset_with_examples_reads_after_them(tiny_model_dir, tiny_decider, tmp_path, shipped):
    """A preset's answers are read after its few-shot examples, so `calibrate --preset` fits (and
    reports) on probabilities read after the same examples, skips rows that are examples, and
    records which examples it saw; the preset then loads with that calibration."""
    import argparse

    from typed_decisions.cli import main
    from typed_decisions.evaluation.sources import question_rows

    shots = [{"state": "WINNER!! Claim your free prize now, call 09061701461", "answer": "yes"},
             {"state": "Are we still on for lunch tomorrow?", "answer": "no"}]
    texts = ["WIN a free phone now! Text WIN to 80082", "Call me when you get home", "URGENT! You have won £1000",
             "Running late, 10 min", "Free entry in a weekly prize draw, txt NOW", "Thanks for dinner last night",
             "Claim your cash reward today, reply YES", "See you at the station", shots[1]["state"]]
    rows = [{"state": t, "gold": "yes" if i % 2 == 0 else "no"} for i, t in enumerate(texts)]
    rows[-1]["gold"] = "no"
    data = tmp_path / "spam.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    own = json.loads(presets.preset_file("sms-spam").read_text())
    own.pop("calibration", None)
    own["examples"] = shots
    src, out = tmp_path / "spam-fewshot.json", tmp_path / "spam-fewshot-fitted.json"
    src.write_text(json.dumps(own))
    assert main(["calibrate", "--model", str(tiny_model_dir), "--preset", str(src), "--data", str(data),
                 "--method", "temperature", "--to-preset", str(out), "--threads", str(THREADS), "-q"]) == 0
    preset = load_preset(out)
    cal = preset.calibration[tiny_decider.name]
    assert cal.examples == presets.examples_hash(preset.examples) is not None
    assert cal.fitted.rows + cal.fitted.test_rows == len(rows) - 1  # the example row is neither fitted nor tested

    # oracle: the test split's NLL before calibration, read by hand with and without the examples
    ns = argparse.Namespace(dataset=None, data=data, spec=None, preset=str(src), quiet=True)
    spec, test_rows, _ = question_rows(ns, "test", None)
    test_rows = [r for r in test_rows if r["state"] != shots[1]["state"]]
    wire = preset.wire_examples()

    def nll(examples):
        total = 0.0
        for n, r in enumerate(test_rows):
            req = spec.row_request(tiny_decider.name, r, n)
            p = tiny_decider.probabilities({**req, **({"examples": examples} if examples else {})})[spec.name]
            total -= np.log(p[spec.gold_index(r, n)])
        return total / len(test_rows)

    assert cal.fitted.test_nll_before == pytest.approx(nll(wire), abs=1e-6)
    assert abs(nll(wire) - nll(None)) > 1e-4  # the examples really were in the prompts
    # the fitted preset answers calibrated, after its examples
    answer = presets.answer_preset(tiny_decider, preset, texts[0])
    assert "T=" in answer["calibration"]


# -----------------------------------------------------------------------------
# the Decider applies a preset's calibration (issue #48): the same answers as the old path


def _old_path(call, response):
    """The old ``PresetCall.result``, kept as the oracle: p rebuilt from the Decider's uncalibrated
    answer, calibrated, reduced again (p → answer → p → answer)."""
    from typed_decisions import reducers
    from typed_decisions.presets import decide_action

    spec = call.preset.question_spec()
    ans = response.answers[spec.name]
    if spec.type == "noul":
        probs = np.array([ans.noul, 1.0 - ans.noul])
    elif spec.type == "choice":
        probs = np.array([ans.probabilities[o] for o in spec.option_names])
    else:
        probs = np.array([ans.probabilities[str(i)] for i in range(len(spec.options))])
    answers = dict(response.answers)
    if call.calibration is not None:
        probs = call.calibration.apply(probs)
        if spec.type == "noul":
            new = reducers.reduce_noul(probs)
        elif spec.type == "choice":
            new = reducers.reduce_choice(probs, spec.option_names, DEFAULT_CONFIDENCE)
        else:
            new = reducers.reduce_score(probs, [ans.legend[str(i)] for i in range(probs.size)], DEFAULT_CONFIDENCE)
        new.label_mass, new.calibration = ans.label_mass, call.calibration_note
        answers[spec.name] = new
    return {"answers": {k: a.model_dump(exclude_none=True) for k, a in answers.items()},
            "act": decide_action(call.preset, probs, call.threshold), "preset": call.preset.name,
            "preset_version": call.preset.version, "model": response.model, "calibration": call.calibration_note}


def raw_dump(response):
    return {k: a.model_dump(exclude_none=True) for k, a in response.answers.items()}


def _close(got, want, path="out"):
    """Equal, numbers within 1e-12 (absolute)."""
    if isinstance(want, dict):
        assert set(got) == set(want), path
        for k in want:
            _close(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, float):
        assert abs(got - want) <= 1e-12, (path, got, want)
    else:
        assert got == want, (path, got, want)


@pytest.mark.parametrize("question, entry, params", [
    (NOUL, {"temperature": 0.4, "contextual": True, "labels": "names", "content_free_state": "N/A",
            "content_free": [0.7, 0.3]}, {}),
    (CHOICE, {"temperature": 2.0, "contextual": True, "labels": "names", "content_free_state": "N/A",
              "content_free": [0.5, 0.25, 0.25]}, {}),
    (CHOICE, {"temperature": 0.7, "labels": "names", "debias": "canonical"}, {"debias": "canonical"}),
    (SCORE, {"temperature": 0.5, "labels": "letters"}, {}),
    (SCORE, {"temperature": 1.6, "contextual": True, "labels": "letters", "content_free_state": "N/A",
             "content_free": [0.2, 0.5, 0.3]}, {"threshold": 0.4}),
], ids=["noul-contextual", "choice-contextual", "choice-canonical", "score", "score-contextual"])
def test_preset_answers_equal_the_old_path_on_the_tiny_model(tiny_decider, question, entry, params):
    p = Preset.model_validate(_preset(question, {tiny_decider.name: entry}))
    for state in ("WINNER!! Claim your free prize now", "My invoice shows a double charge, please fix it."):
        call = prepare_preset(tiny_decider.name, p, state, params, decider=tiny_decider)
        assert call.calibration is not None and call.heads is not None  # the entry applies: a test that can fail
        raw = tiny_decider.run(call.request, label_mode=call.label_mode)  # what the old path calibrated
        want = _old_path(call, raw)
        got = presets.answer_preset(tiny_decider, p, state, params)
        assert got["calibration"] == call.calibration_note and got["answers"] != raw_dump(raw)  # calibrated
        _close(got, want)
