"""The decide subcommand end to end on the tiny real model (in-process, stdin and file)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path


from typed_decisions.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ticket.json"


def test_decide_prints_typed_answers(tiny_model_dir, capsys):
    assert main(["decide", "--model", str(tiny_model_dir), "--threads", "2", str(EXAMPLE)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {a["type"] for a in out["answers"].values()} == {"choice", "noul", "score"}
    team = out["answers"]["team"]
    assert team["choice"] in ("billing", "technical", "sales")
    assert abs(sum(team["probabilities"].values()) - 1) < 1e-9
    assert isinstance(out["usage"]["input_tokens"], int) and out["usage"]["output_tokens"] == 0


def test_decide_explain_from_stdin(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(EXAMPLE.read_text()))
    assert main(["decide", "--model", str(tiny_model_dir), "--labels", "letters", "--explain", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    team = out["questions"]["team"]
    assert team["labels"] == ["A", "B", "C"]
    assert out["prefix_text"] in team["prompt"]
    assert team["nodes"][0]["prefix"] == [] and len(team["nodes"][0]["logits"]) == 3


def test_decide_bad_request_is_one_clear_line(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "m", "state": "x", "questions": {
        "team": {"type": "choice", "criteria": {}}}}))
    assert main(["decide", "--model", str(tiny_model_dir), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "questions.team.criteria" in err and "Traceback" not in err


def test_decide_refuses_a_tampered_export(tiny_model_dir, tmp_path, capsys):
    import shutil

    copy = tmp_path / "export"
    shutil.copytree(tiny_model_dir, copy)
    (copy / ".verified.json").unlink(missing_ok=True)
    with open(copy / "tokenizer.json", "a") as f:
        f.write(" ")
    assert main(["decide", "--model", str(copy), str(EXAMPLE)]) == 2
    err = capsys.readouterr().err
    assert "ArtifactError" in err and "tokenizer.json" in err


def test_explain_reports_this_calls_tokens(tiny_decider):
    req = json.loads(EXAMPLE.read_text())
    tiny_decider.engine.clear_cache()
    first = tiny_decider.explain(req)
    again = tiny_decider.explain(req)  # the state prefix now comes from the cache
    assert 0 < again["tokens_computed"] < first["tokens_computed"] <= first["usage"]["input_tokens"]
