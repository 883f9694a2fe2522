"""benchmarks/jevbench_default.py end to end on the fake decider behind a live server (#33): jevbench's
one-case demo suite for both readouts, and the result file (the harness's schema 1: the command,
git, the machine, scores per readout). Fast tier: the fake answers in microseconds (~5 s in all)."""

from __future__ import annotations

import json
import sys

import pytest

from td_optional import require  # noqa: E402

require("fastapi", "pip install 'typed-decisions-runtime[server]'")
require("jevbench", "pip install 'typed-decisions-runtime[test]'")

import td_fakes  # noqa: E402
from benchmarks import jevbench_default as script  # noqa: E402
from benchmarks.harness import problems  # noqa: E402
from td_live import live_server  # noqa: E402


def test_scores_both_readouts_into_one_result_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["jevbench_default.py", "--suite", "examples"])
    out = tmp_path / "r.json"
    with live_server(td_fakes.FakeDecider("fake-model")) as url:
        assert script.main(["--url", url, "--suite", "examples", "--readouts", "default,rotate",
                            "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and doc["tool"] == "jevbench" and doc["model"] == "fake-model"
    assert doc["command"] == "python -m benchmarks.jevbench_default --suite examples"
    assert doc["git"] and doc["machine"]["class"] and doc["machine"]["load_avg_start"]
    res = doc["results"]
    assert (res["model"], res["suite"], res["domains"]) == ("fake-model", "examples", ["customer_support"])
    for readout in ("default", "rotate"):
        got = res["readouts"][readout]
        assert got["errors"] == 0 and got["requests"] > 0 and got["incomplete"] == []
        assert set(got["dimensions"]) == {"REP", "BAT", "MEA", "LOG", "CHO"} and got["overall"] is not None
        assert got["relations"]["batch_solo"] == 1.0  # the fake, like the engine, is batch independent
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["out"] == str(out)


def test_refuses_an_unknown_readout(tmp_path):
    with live_server(td_fakes.FakeDecider("fake-model")) as url, pytest.raises(SystemExit):
        script.main(["--url", url, "--readouts", "default,sharpen", "--out", str(tmp_path / "r.json")])
