"""The decide subcommand end to end on the tiny real model (in-process, stdin and file)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from td_threads import THREADS

from typed_decisions.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ticket.json"


def test_decide_prints_typed_answers(tiny_model_dir, capsys):
    assert main(["decide", "--model", str(tiny_model_dir), "--threads", str(THREADS), str(EXAMPLE)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {a["type"] for a in out["answers"].values()} == {"choice", "noul", "score"}
    team = out["answers"]["team"]
    assert team["choice"] in ("billing", "technical", "sales")
    assert abs(sum(team["probabilities"].values()) - 1) < 1e-9
    assert isinstance(out["usage"]["input_tokens"], int) and out["usage"]["output_tokens"] == 0


def test_decide_explain_json_keeps_answers(tiny_model_dir, tiny_decider, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(EXAMPLE.read_text()))
    assert main(["decide", "--model", str(tiny_model_dir), "--labels", "letters", "--explain", "--json",
                 "-q", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    team = out["questions"]["team"]
    assert [o["label"] for o in team["options"]] == ["A", "B", "C"]
    assert team["nodes"][0]["prefix"] == [] and len(team["nodes"][0]["logits"]) == 3
    # The answers are run()'s, and every option's probability is recomputable from its own paths'
    # token logits: the restricted softmax at each node, multiplied along the path, summed per option.
    expected = tiny_decider.run(json.loads(EXAMPLE.read_text()), label_mode="letters").model_dump(mode="json")
    assert out["answers"].keys() == expected["answers"].keys()
    for name, q in out["questions"].items():
        want = expected["answers"][name]
        got = out["answers"][name]
        for key in ("choice", "noul", "score"):
            if key in want:
                # explain and run are two engine calls: their float32 tree blocks may be laid out
                # differently (~1e-7, docs/METHOD.md)
                assert got[key] == pytest.approx(want[key], abs=1e-6)
        assert q["answer"] == got
        node_softmax = {}
        for node in q["nodes"]:
            if node["logits"] is not None:
                z = np.array(node["logits"])
                node_softmax[tuple(node["prefix"])] = dict(zip(node["children"], np.exp(z - z.max()) / np.exp(z - z.max()).sum()))
        for o in q["options"]:
            total = 0.0
            for path in o["paths"]:
                ids = [t["id"] for t in path["tokens"]]
                pp = 1.0
                for k, t in enumerate(ids):
                    pp *= node_softmax.get(tuple(ids[:k]), {t: 1.0})[t]
                assert path["probability"] == pytest.approx(pp, abs=1e-9)
                total += pp
            o["_sum"] = total
        norm = sum(o["_sum"] for o in q["options"])
        for o in q["options"]:
            assert o["probability"] == pytest.approx(o["_sum"] / norm, abs=1e-9)


def test_decide_explain_text_shows_every_option_label_and_probability(tiny_model_dir, tiny_decider, capsys):
    assert main(["decide", "--model", str(tiny_model_dir), "--explain", "-q", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    e = tiny_decider.explain(json.loads(EXAMPLE.read_text()))
    assert "shared-prefix boundary" in text
    for name, q in e.questions.items():
        assert f"question {name!r}" in text
        for o in q.options:
            row = next((line for line in text.splitlines() if line.strip().startswith(o.option)
                        and repr(o.paths[0].tokens[0].text) in line), None)
            assert row is not None, (name, o.option)
            assert f"{o.probability:.3f}" in row
        assert "answer:" in text
    assert e.answers["team"].choice in text


def test_decide_resolves_catalogue_names(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import shutil

    from typed_decisions.exports import export_dir

    monkeypatch.setenv("TYPED_DECISIONS_CACHE", str(tmp_path / "cache"))
    # A missing export: one clear line with the command that makes it.
    assert main(["decide", "--model", "tiny", "-q", str(EXAMPLE)]) == 2
    err = capsys.readouterr().err
    assert "has no export" in err and "typed-decisions export smollm2-135m --out" in err
    assert "Traceback" not in err
    assert main(["decide", "--model", "tiny:int8", "-q", str(EXAMPLE)]) == 2
    assert "--quantize int8" in capsys.readouterr().err
    assert main(["decide", "--model", "no-such-model", "-q", str(EXAMPLE)]) == 2
    assert "neither an exported model directory nor a catalogue model" in capsys.readouterr().err
    # The name (and its alias, and the request's own "model" field) finds the cached export.
    shutil.copytree(tiny_model_dir, export_dir("tiny"))
    assert main(["decide", "--model", "smollm2-135m", "-q", str(EXAMPLE)]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert main(["decide", "--model", str(tiny_model_dir), "-q", str(EXAMPLE)]) == 0
    assert json.loads(capsys.readouterr().out) == by_name
    req = tmp_path / "req.json"
    req.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "model": "tiny"}))
    assert main(["decide", str(req)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["answers"] == by_name["answers"]
    assert "loading" in captured.err and "loaded" in captured.err
    # models list shows where the export is
    assert main(["models", "list", "--verify"]) == 0
    listing = capsys.readouterr().out
    line = next(ln for ln in listing.splitlines() if ln.split()[:1] == ["smollm2-135m"] and "exports" in ln)
    assert line.split()[1:] == ["verified", str(export_dir("tiny"))]
    assert any(ln.split()[:2] == ["smollm2-135m:int8", "missing"] for ln in listing.splitlines())


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
    assert 0 < again.tokens.tokens_computed < first.tokens.tokens_computed <= first.usage.input_tokens
