"""The fitted readout on the tiny real model: what the head reads is the engine's own hidden state
at the answer position (oracle: the engine run on that context alone), a fitted answer is the same
alone, batched and cached, the zero-shot answers beside it do not move, stale heads are refused
by name, and a fitted preset answers the same through Python, the HTTP endpoint and the CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions import presets
from typed_decisions.decider import parse_request
from typed_decisions.errors import InvalidRequestError
from typed_decisions.presets import register_preset, with_head

pytest.importorskip("sklearn", reason="the [fit] extra: pip install 'typed-decisions-runtime[fit]'")
pytestmark = pytest.mark.model

TEAM = {"type": "choice", "instructions": "Which team should handle this ticket?",
        "criteria": {"billing": "payments, refunds, invoices", "tech": "bugs, errors, crashes",
                     "sales": "buying, prices, demos"}}
TEXTS = {"billing": ["I was charged twice this month", "please refund my last payment", "my invoice shows the wrong amount",
                     "my card was declined at renewal", "there is a billing error on my account"],
         "tech": ["the app crashes when I open it", "the login page is broken", "I get error 500 when saving",
                  "sync stopped working yesterday", "export fails with a bug"],
         "sales": ["I want to buy 50 more seats", "what is your enterprise pricing", "can I book a demo",
                   "do you give discounts to schools", "I would like a quote for my team"]}
ROWS = [{"state": t, "answer": team} for team, texts in TEXTS.items() for t in texts]
STATE = "my card got charged two times for one order"


@pytest.fixture(scope="module")
def head(tiny_decider):
    """A head reading a mid layer and the last hidden state (layers="auto"), so every path below
    carries the mid-layer states too; the default reads the last alone."""
    return tiny_decider.fit(TEAM, ROWS, components=16, layers="auto")


def test_the_default_head_reads_the_last_hidden_state_alone(tiny_decider, head):
    default = tiny_decider.fit(TEAM, ROWS, components=16)
    assert default.layers == ["last"] and default.hidden_size * 2 == head.hidden_size
    (r,) = tiny_decider.run_many([_request(tiny_decider)], heads=[{"team": default}])
    assert r.answers["team"].calibration.startswith(f"fitted head {default.id}")


def _request(decider, state=STATE, question=TEAM):
    return {"model": decider.name, "state": state, "questions": {"team": question}}


def test_the_head_reads_the_engine_s_hidden_state_at_the_answer_position(tiny_decider, head):
    """With layers="auto" the head reads the deepest mid layer the export outputs and the last
    hidden state, at the answer position of the canonical reading: oracle, the engine on that context alone."""
    from typed_decisions.heads import stack_states

    layer_ids = tiny_decider.engine.hidden_layers
    assert layer_ids and head.layers == [max(layer_ids), "last"]
    hidden, zero, groups, mids = tiny_decider.features(TEAM, [{"state": STATE, "answer": "billing"}],
                                                       debias="canonical", layers=True)
    canonical = {**_request(tiny_decider), "debias": "canonical"}
    comp = tiny_decider.compiler.compile(parse_request(canonical), settings=tiny_decider.settings(debias="canonical"))
    (q,) = comp.questions
    alone: list[np.ndarray] = []
    alone_mid: list[np.ndarray] = []
    tiny_decider.engine.next_token_logits([comp.prefix_ids + q.suffix_ids], [[0]], share_prefixes=False,
                                          hidden_out=alone, layers_out=alone_mid)
    assert np.max(np.abs(hidden[0] - alone[0])) < 1e-5 and np.max(np.abs(mids[0] - alone_mid[0])) < 1e-5
    expected = tiny_decider.probabilities(canonical)["team"]
    assert np.max(np.abs(zero[0] - expected)) < 1e-9 and groups.tolist() == [0]
    answer = tiny_decider.run_many([_request(tiny_decider)], heads=[{"team": head}])[0].answers["team"]
    fitted = head.probabilities(stack_states(hidden, mids, layer_ids, head.layers)[0], zero[0])
    assert np.max(np.abs(np.array([answer.probabilities[c] for c in head.classes]) - fitted)) < 1e-6
    assert answer.calibration.startswith(f"fitted head {head.id}")


def test_a_fitted_answer_is_the_same_alone_batched_and_cached_and_its_neighbours_do_not_move(tiny_decider, head):
    others = [_request(tiny_decider, "the page shows error 404"), _request(tiny_decider, "how much is the pro plan")]
    tiny_decider.engine.clear_cache()
    (alone,) = tiny_decider.run_many([_request(tiny_decider)], heads=[{"team": head}], use_cache=False)
    batched = tiny_decider.run_many([others[0], _request(tiny_decider), others[1]], heads=[None, {"team": head}, None])
    cached = tiny_decider.run_many([_request(tiny_decider)], heads=[{"team": head}])[0]
    plain = tiny_decider.run_many(others)
    p = lambda r: np.array(list(r.answers["team"].probabilities.values()))
    assert np.max(np.abs(p(alone) - p(batched[1]))) < 1e-6
    assert np.max(np.abs(p(alone) - p(cached))) < 1e-6
    for a, b in zip([batched[0], batched[2]], plain):  # zero-shot neighbours: as without a head in the call
        assert np.max(np.abs(p(a) - p(b))) < 1e-6 and a.answers["team"].calibration is None


def test_explain_shows_the_zero_shot_answer_and_the_head_s_parts(tiny_decider, head):
    from typed_decisions.explain import render_text

    e = tiny_decider.explain(_request(tiny_decider), heads={"team": head})
    f = e.questions["team"].fitted
    zero = tiny_decider.probabilities({**_request(tiny_decider), "debias": "canonical"})["team"]
    assert f is not None and f.head == head.id
    assert max(abs(f.zero_shot[o] - z) for o, z in zip(TEAM["criteria"], zero)) < 1e-9
    assert f.probabilities == e.answers["team"].probabilities
    logits = np.array([f.logit_from_zero_shot[c] + f.logit_from_hidden[c] for c in head.classes])
    soft = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert np.max(np.abs(soft - [f.probabilities[c] for c in head.classes])) < 1e-9
    assert f"fitted head {head.id}" in render_text(e)
    assert tiny_decider.explain(_request(tiny_decider)).questions["team"].fitted is None


def test_a_head_answers_the_options_by_name_in_any_order(tiny_decider, head):
    listed = {"tech": TEAM["criteria"]["tech"], "sales": TEAM["criteria"]["sales"], "billing": TEAM["criteria"]["billing"]}
    answer = tiny_decider.run_many([_request(tiny_decider, question={**TEAM, "criteria": listed})],
                                   heads=[{"team": head}])[0].answers["team"]
    assert list(answer.probabilities) == ["tech", "sales", "billing"]
    assert abs(sum(answer.probabilities.values()) - 1) < 1e-12


@pytest.mark.parametrize("change, why", [
    ({"label_mode": "letters"}, "names/canonical/default; this call reads letters/canonical/default"),
    ({"question": {**TEAM, "instructions": "Who should answer?"}}, "another prompt"),
    ({"question": {**TEAM, "criteria": {**TEAM["criteria"], "legal": None}}}, "not the head's classes"),
])
def test_a_stale_head_is_refused_naming_what_differs(tiny_decider, head, change, why):
    request = _request(tiny_decider, question=change.get("question", TEAM))
    with pytest.raises(InvalidRequestError, match=why) as e:
        tiny_decider.run_many([request], heads=[{"team": head}], label_mode=change.get("label_mode"))
    assert e.value.loc == ("heads", "team")


def test_a_head_of_another_export_is_refused(tiny_decider, head):
    other = head.model_copy(update={"export_sha256": "0" * 64})
    with pytest.raises(InvalidRequestError, match="another export"):
        tiny_decider.run_many([_request(tiny_decider)], heads=[{"team": other}])


def test_a_head_fitted_before_a_re_export_is_refused_after_it(tiny_decider, tiny_bare_dir, head):
    """The same weights re-exported with another graph (here without its mid-layer outputs, as the
    export before them was): another export hash, so the head is refused and told to refit."""
    from typed_decisions.decider import Decider

    other = Decider.from_dir(tiny_bare_dir, threads=THREADS)
    assert other.model_key == tiny_decider.model_key and other.export_sha256 != tiny_decider.export_sha256
    with pytest.raises(InvalidRequestError, match="another export.*refit on this export"):
        other.run_many([_request(other)], heads=[{"team": head}])


def _team_preset():
    return {"name": "team", "version": 1, "question": {
        "name": "team", "type": "choice", "instructions": TEAM["instructions"],
        "options": [{"name": k, "description": v} for k, v in TEAM["criteria"].items()]}}


def test_a_fitted_preset_answers_the_same_in_python_and_over_http(tiny_decider, head, shipped):
    from fastapi.testclient import TestClient

    from typed_decisions.server import ServerSettings, create_app

    register_preset(with_head(_team_preset(), head))
    expected = presets.answer_preset(tiny_decider, "team", STATE)
    assert expected["calibration"] == f"preset team v1 for {tiny_decider.model_key}: fitted head {head.id}"
    zero = presets.answer_preset(tiny_decider, "team", STATE, {"fitted": "none"})
    assert zero["answers"]["team"]["probabilities"] != expected["answers"]["team"]["probabilities"]
    with TestClient(create_app(tiny_decider, settings=ServerSettings())) as client:
        r = client.post("/v1/presets/team", json={"state": STATE})
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["calibration"] == expected["calibration"]
        for k, v in expected["answers"]["team"]["probabilities"].items():
            assert abs(got["answers"]["team"]["probabilities"][k] - v) < 1e-9
        # a preset fitted for another model only: 422 naming params.fitted, and the zero-shot way out
        other = head.model_copy(update={"model": "another-model"})
        data = _team_preset() | {"version": 2, "fitted": {"another-model": other.model_dump(mode="json")}}
        register_preset(data)
        r = client.post("/v1/presets/team", json={"state": STATE})
        assert r.status_code == 422 and "params.fitted" in r.text, r.text
        r = client.post("/v1/presets/team", json={"state": STATE, "params": {"fitted": "none"}})
        assert r.status_code == 200 and r.json()["answers"]["team"]["probabilities"] == zero["answers"]["team"]["probabilities"]


def test_the_server_serves_an_operator_s_fitted_preset_file(tiny_decider, head, tmp_path):
    from fastapi.testclient import TestClient

    from typed_decisions.server import create_app
    from typed_decisions.server.main import serve_parser, settings_from_args

    path = tmp_path / "team.json"
    path.write_text(json.dumps(with_head(_team_preset(), head)))
    expected = presets.answer_preset(tiny_decider, presets.load_preset(path), STATE)
    settings = settings_from_args(serve_parser().parse_args(["--model", "x", "--preset", str(path)]))
    assert settings.presets == [path]
    with TestClient(create_app(tiny_decider, settings=settings)) as client:
        listed = client.get("/v1/presets").json()["presets"]
        assert {"name": "team", "version": 1, "type": "choice"}.items() <= listed[0].items()
        r = client.post("/v1/presets/team", json={"state": STATE})
        assert r.status_code == 200, r.text
        assert r.json()["calibration"] == expected["calibration"] and "fitted head" in expected["calibration"]
        assert client.get("/v1/presets/team").json()["preset"]["fitted"]["smollm2-135m"]["classes"] == head.classes


def test_fit_command_writes_a_preset_that_presets_answer_uses(tiny_model_dir, tmp_path, capsys):
    from typed_decisions.cli import main

    rows = tmp_path / "tickets.jsonl"
    rows.write_text("".join(json.dumps({"text": r["state"], "team": r["answer"]}) + "\n" for r in ROWS))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**_team_preset()["question"], "state_field": "text", "gold_field": "team"}))
    out = tmp_path / "team.json"
    assert main(["fit", "--model", str(tiny_model_dir), "--data", str(rows), "--spec", str(spec), "--out", str(out),
                 "--components", "16", "-q"]) == 0
    printed = capsys.readouterr().out
    assert "15 rows {'billing': 5, 'tech': 5, 'sales': 5}" in printed and f"preset: {out} (team v1)" in printed
    assert "5 rows of some option; below 8 per option a head's probabilities are not calibrated" in printed
    saved = json.loads(out.read_text())
    assert list(saved["fitted"]) == ["smollm2-135m"] and saved["fitted"]["smollm2-135m"]["fitted"]["rows"] == 15
    assert main(["presets", "answer", str(out), "--model", str(tiny_model_dir), STATE]) == 0
    answered = json.loads(capsys.readouterr().out)
    assert answered["calibration"].startswith("preset team v1 for smollm2-135m: fitted head sha256:")
    # a row whose label is not an option: refused with its index, nothing written
    rows.write_text(rows.read_text() + json.dumps({"text": "hello", "team": "legal"}) + "\n")
    bad = tmp_path / "bad.json"
    assert main(["fit", "--model", str(tiny_model_dir), "--data", str(rows), "--spec", str(spec), "--out", str(bad),
                 "-q"]) == 2
    assert "row 15: gold label 'legal' is not an option" in capsys.readouterr().err and not bad.exists()


def test_the_readmes_fit_and_serve_commands_run_as_written(tiny_model_dir, tiny_decider, tmp_path, capsys,
                                                           monkeypatch):
    """The README's two fit commands, read from it and run on the tiny model: the example rows and
    spec it names exist and fit into a preset, and the served preset answers with that head."""
    import re
    import shlex
    from pathlib import Path

    from fastapi.testclient import TestClient

    from typed_decisions.cli import main
    from typed_decisions.server import create_app
    from typed_decisions.server.main import serve_parser, settings_from_args

    root = Path(__file__).resolve().parents[1]
    section = (root / "README.md").read_text().split("### Fit a question on your own labelled rows", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    commands = {line.split()[1]: shlex.split(line.split("#")[0])[1:] for line in block.splitlines()
                if line.startswith("typed-decisions ")}
    assert set(commands) == {"fit", "serve"}
    monkeypatch.chdir(tmp_path)  # team.json lands where the user stands; the examples are the checkout's

    def here(args):
        args = [str(tiny_model_dir) if a == "default" else a for a in args]
        return [str(root / a) if a.startswith("examples/") else a for a in args]

    assert main(here(commands["fit"]) + ["-q"]) == 0
    printed = capsys.readouterr().out
    assert "30 rows {'billing': 10, 'technical': 10, 'sales': 10}" in printed and "preset: team.json (team v1)" in printed
    head_id = re.search(r"fitted head (sha256:[0-9a-f]{12})", printed).group(1)
    gain = json.loads((tmp_path / "team.json").read_text())["fitted"]["smollm2-135m"]["fitted"]["cv_gain"]
    assert f"head − zero-shot, held out: {gain[0]:+.3f} [{gain[1]:+.3f}, {gain[2]:+.3f}] (paired, 95 %, 30 rows)" in printed
    assert ("note: the interval reaches 0, so these rows do not show the head ahead" in printed) == (gain[1] <= 0)
    settings = settings_from_args(serve_parser().parse_args(here(commands["serve"])[1:]))
    with TestClient(create_app(tiny_decider, settings=settings)) as client:
        r = client.post("/v1/presets/team", json={"state": "My invoice was charged twice, please refund it."})
        assert r.status_code == 200, r.text
        assert r.json()["calibration"] == f"preset team v1 for smollm2-135m: fitted head {head_id}"
        assert set(r.json()["answers"]["team"]["probabilities"]) == {"billing", "technical", "sales"}


def test_a_choice_head_reads_each_row_once_in_canonical_order_by_default(tiny_decider, head):
    """Read in the listed order only, a head learns the options' places too (the default model
    flipped 42.5 % of binary answers when the options were swapped). By default a choice row is
    read once under debias='canonical' (one prompt for every listing); under debias='none' every
    cyclic order is read, unless rotations says otherwise."""
    assert (head.debias, head.fitted.rotations) == ("canonical", 1)
    listed = tiny_decider.fit(TEAM, ROWS, debias="none", rotations=1, components=16)
    rotated = tiny_decider.fit(TEAM, ROWS, debias="none", components=16)
    assert (listed.fitted.rotations, rotated.fitted.rotations) == (1, len(TEAM["criteria"]))
    assert listed.debias == rotated.debias == "none"
    # the rotated reads are the listed rows' states under the other orders: the same hidden states
    # a request listing the options that way computes
    names = list(TEAM["criteria"])
    h_all, p_all, groups = tiny_decider.features(TEAM, ROWS[:2], rotations=3)
    assert list(groups) == [0, 0, 0, 1, 1, 1]
    order = names[1:] + names[:1]
    h_one, p_one, _ = tiny_decider.features({**TEAM, "criteria": {n: TEAM["criteria"][n] for n in order}}, ROWS[:1])
    assert np.allclose(h_all[1], h_one[0], atol=1e-5) and not np.allclose(h_all[0], h_one[0], atol=1e-5)
    assert np.allclose(p_all[1], p_one[0][[order.index(n) for n in names]], atol=1e-9)  # in TEAM's class order


def test_rotations_under_canonical_order_are_refused(tiny_decider):
    """Under debias='canonical' every listing is shown alike, so R rotations would read R copies."""
    with pytest.raises(ValueError, match="rotations=3 .*debias='canonical'.*rotations=1"):
        tiny_decider.fit(TEAM, ROWS, rotations=3, debias="canonical", components=16)


def test_a_head_fitted_under_canonical_order_answers_every_listing_alike(tiny_decider, head):
    """#31's option-order invariance for fitted choice questions, exactly: under debias='canonical'
    every listing of the options is one prompt, so one hidden state, so one fitted answer."""
    names = list(TEAM["criteria"])
    answers = []
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]):
        listed = {**TEAM, "criteria": {names[j]: TEAM["criteria"][names[j]] for j in order}}
        body = _request(tiny_decider, question=listed)  # no debias of its own: read as the head was fitted
        (r,) = tiny_decider.run_many([body], heads=[{"team": head}])
        a = r.answers["team"]
        assert a.calibration.startswith(f"fitted head {head.id}") and list(a.probabilities) == [names[j] for j in order]
        answers.append({n: a.probabilities[n] for n in names})
    for other in answers[1:]:
        assert max(abs(other[n] - answers[0][n]) for n in names) < 1e-9


def test_fit_refuses_a_head_its_cv_finds_behind_zero_shot_unless_forced(tiny_model_dir, tmp_path, capsys,
                                                                        monkeypatch):
    """The fit is real; its report is then made to say what a losing fit says (held-out accuracy
    below zero-shot beyond its interval), since rows that reliably make the anchored head lose do not exist: the CLI
    writes nothing and says why, and with --force writes it and warns. Without -q it prints the
    reads it expects and their time before reading."""
    from typed_decisions.cli import main
    from typed_decisions.evaluation import fit_cli

    real = fit_cli.fit_spec

    def losing(*args, **kwargs):
        head = real(*args, **kwargs)
        return head.model_copy(update={"fitted": head.fitted.model_copy(update={"cv_gain": [-0.2, -0.4, -0.05]})})

    monkeypatch.setattr(fit_cli, "fit_spec", losing)
    rows = tmp_path / "tickets.jsonl"
    rows.write_text("".join(json.dumps({"text": r["state"], "team": r["answer"]}) + "\n" for r in ROWS))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**_team_preset()["question"], "state_field": "text", "gold_field": "team"}))
    out = tmp_path / "team.json"
    args = ["fit", "--model", str(tiny_model_dir), "--data", str(rows), "--spec", str(spec), "--out", str(out),
            "--components", "16"]
    assert main(args) == 1 and not out.exists()
    captured = capsys.readouterr()
    assert re.search(r"reading 15 rows: about \d+\.\d min \(\d+\.\d\d s a read\)", captured.out)
    assert "behind the zero-shot reading on its own held-out rows (accuracy -0.200" in captured.err
    assert "nothing written" in captured.err and "--force" in captured.err
    assert main(args + ["--force", "-q"]) == 0 and out.exists()
    assert "WARNING: written because of --force" in capsys.readouterr().err
