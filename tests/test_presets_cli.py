"""typed_decisions/presets/cli.py: ``typed-decisions presets`` through the one entry point — what
each subcommand prints, its exit status, and that ``answer`` asks exactly what ``answer_preset``
asks with the same params (on ``td_fakes.FakeDecider``: no model)."""

from __future__ import annotations

import io
import json

import pytest
from td_fakes import FakeDecider

from typed_decisions import presets
from typed_decisions.cli import main
from typed_decisions.presets import content_hash, load_preset, store

STATE = "WIN a free prize now, reply STOP to opt out"


def test_list_prints_every_shipped_preset_with_its_version_and_type(capsys):
    assert main(["presets", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(presets.list_presets()) >= 3
    for line, name in zip(lines, presets.list_presets()):
        p = load_preset(name)
        assert line.split()[:3] == [name, f"v{p.version}", p.question.type], line


def test_show_prints_the_preset_and_hash_its_registered_hash(capsys):
    assert main(["presets", "show", "sms-spam"]) == 0
    assert json.loads(capsys.readouterr().out) == load_preset("sms-spam").model_dump(mode="json", exclude_none=True)
    registry = json.loads((store._folder() / presets.REGISTRY).read_text())
    for name in ("sms-spam", str(store._folder() / "sentiment-score.json")):  # a name, or a file's path
        assert main(["presets", "hash", name]) == 0
        ((key, versions),) = json.loads(capsys.readouterr().out).items()
        ((version, digest),) = versions.items()
        assert registry[key][version] == digest


def test_register_ships_a_new_version_that_then_loads(shipped, tmp_path, capsys):
    data = json.loads((shipped / "sms-spam.json").read_text())
    data = {**data, "version": data["version"] + 1, "description": "a second wording of the description"}
    path = tmp_path / "sms-spam.json"
    path.write_text(json.dumps(data))
    assert main(["presets", "register", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"registered sms-spam v{data['version']}: {content_hash(data)}")
    assert load_preset("sms-spam").version == data["version"]


@pytest.fixture
def fake(monkeypatch):
    """``Decider.from_dir`` → a FakeDecider; ``calls`` records what it was given and the params
    the command passed to ``answer_preset`` (which still answers)."""
    from typed_decisions.decider import Decider
    from typed_decisions.presets import cli

    decider, calls = FakeDecider(), []
    monkeypatch.setattr(Decider, "from_dir", lambda model, **kw: calls.append((model, kw)) or decider)
    answer = cli.answer_preset
    monkeypatch.setattr(cli, "answer_preset", lambda d, name, state, params: calls.append(params) or
                        answer(d, name, state, params))
    return decider, calls


@pytest.mark.parametrize(("flags", "params"), [
    ([], {}),
    (["--labels", "letters", "--threshold", "0.6"], {"label_mode": "letters", "threshold": 0.6}),
    (["--no-preset-calibration", "--zero-shot"], {"calibration": "none", "fitted": "none"}),
])
def test_answer_is_answer_preset_with_the_flags_as_params(fake, capsys, flags, params):
    decider, calls = fake
    # the state after the options: argparse leaves it unparsed, the command takes it
    assert main(["presets", "answer", "sms-spam", "--model", "m", "--threads", "3", *flags, STATE]) == 0
    assert json.loads(capsys.readouterr().out) == presets.answer_preset(decider, "sms-spam", STATE, params)
    assert calls == [("m", {"threads": 3, "calibration": None}), params]


def test_answer_reads_the_state_from_stdin(fake, capsys, monkeypatch):
    decider, _ = fake
    monkeypatch.setattr("sys.stdin", io.StringIO(STATE))
    assert main(["presets", "answer", "sentiment-score", "-", "--model", "m"]) == 0
    assert json.loads(capsys.readouterr().out) == presets.answer_preset(decider, "sentiment-score", STATE, {})


def test_errors_exit_2(capsys):
    assert main(["presets", "show", "no-such-preset"]) == 2
    assert "PresetError" in capsys.readouterr().err
    for argv in (["presets"], ["presets", "bogus"], ["presets", "answer", "sms-spam", "--model", "m", "a", "b"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv


def test_the_old_import_path_is_the_same_command():
    """``typed_decisions.evaluation.main_presets`` was where the command lived before it moved
    beside the presets (issue #30): the name still answers, with the presets' own function."""
    import typed_decisions.evaluation as evaluation
    from typed_decisions.presets.cli import main_presets

    assert evaluation.main_presets is main_presets
