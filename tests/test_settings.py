"""A request's reading resolved once (settings.py) and the one content-free cache (content_free.py),
without a model: the precedence, the bound, and that p_cf is read once per question and reading."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from typed_decisions.calibration import CalibrationFile, TypeCalibration
from typed_decisions.content_free import ContentFreeCache, content_free_probabilities
from typed_decisions.schema import parse_request
from typed_decisions.settings import Settings

TEAM = {"type": "choice", "criteria": {"billing": "money", "tech": "bugs"}}
MOOD = {"type": "score", "criteria": ["bad", "good"]}


def _request(state="s", debias=None, examples=None, **questions):
    body = {"model": "m", "state": state, "questions": questions or {"team": TEAM}}
    if debias is not None:
        body["debias"] = debias
    if examples is not None:
        body["examples"] = examples
    return parse_request(body)


def test_the_request_wins_over_the_call_which_wins_over_the_decider():
    d = Settings(label_mode="letters", debias="rotate", wording="w")
    assert d.resolve(None) == d
    assert d.resolve(None, label_mode="names", debias="canonical") == Settings("names", "canonical", "w")
    assert d.resolve(_request(debias="none"), debias="canonical").debias == "none"
    assert d.resolve(_request(), debias="canonical").debias == "canonical"
    assert d.resolve(_request()).debias == "rotate"
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.debias = "none"  # type: ignore[misc]


def test_the_cache_is_bounded_and_least_recently_used():
    c = ContentFreeCache(maxsize=2)
    c.put("a", np.array([1.0]))
    c.put("b", np.array([2.0]))
    assert c.get("a") is not None  # a is now the most recent
    c.put("c", np.array([3.0]))
    assert c.get("b") is None and c.get("a") is not None and c.get("c") is not None and len(c) == 2


def _file(contextual_types=("choice",)):
    return CalibrationFile(model="m", created="2026-01-01", content_free_state="N/A",
                           per_type={t: TypeCalibration(temperature=1.5, contextual=True) for t in contextual_types})


class _Reader:
    """A stand-in for the Decider's read: records the requests it was asked, answers uniform p."""

    def __init__(self):
        self.asked = []

    def __call__(self, req, settings):
        self.asked.append((req, settings))
        return {n: np.full(len(q.criteria), 1 / len(q.criteria)) for n, q in req.questions.items()}


def test_p_cf_is_read_once_per_question_and_reading():
    read, cache = _Reader(), ContentFreeCache()
    s = Settings(calibration=_file())
    for state in ("first message", "second message"):
        out = content_free_probabilities(_request(state, team=TEAM, mood=MOOD), s, cache, read)
        assert set(out) == {"team"}  # only the contextual type
    assert len(read.asked) == 1 and read.asked[0][0].state == "N/A"  # the content-free state, once
    content_free_probabilities(_request(team=TEAM), dataclasses.replace(s, debias="rotate"), cache, read)
    assert len(read.asked) == 2  # another reading: read again
    assert content_free_probabilities(_request(), Settings(), cache, read) is None  # no file
    assert content_free_probabilities(_request(mood=MOOD), s, cache, read) is None  # no contextual question


def test_with_examples_p_cf_is_read_from_the_whole_request():
    read, cache = _Reader(), ContentFreeCache()
    s = Settings(calibration=_file())
    examples = [{"state": "refund please", "answers": {"team": "billing"}}]
    for state in ("a", "b"):
        out = content_free_probabilities(_request(state, examples=examples, team=TEAM, mood=MOOD), s, cache, read)
        assert set(out) == {"team"}
    (req, _), = read.asked
    assert req.state == "N/A" and req.examples and set(req.questions) == {"team", "mood"}


def test_the_decider_resolves_settings_in_one_place():
    """Issue #48: no ``x or self.x`` left in the Decider, the compiler or the heads: the
    precedence is written in settings.py only."""
    root = Path(__file__).resolve().parents[1] / "typed_decisions"
    for name in ("decider.py", "compiler.py", "heads.py", "answers.py", "content_free.py", "evaluation/run.py"):
        text = (root / name).read_text(encoding="utf-8")
        for pattern in ("or self.debias", "or self.label_mode", "debias or deb", "request.debias or", "req.debias or"):
            assert pattern not in text, (name, pattern)
    assert len((root / "decider.py").read_text(encoding="utf-8").splitlines()) <= 320  # the thin shell


def test_the_compiler_refuses_settings_of_another_wording():
    from typed_decisions.compiler import Compiler

    compiler = Compiler.__new__(Compiler)  # only the wording check runs before any tokenizing
    compiler.wording_name = "default"
    with pytest.raises(ValueError, match="settings.wording is 'terse'"):
        compiler.compile(_request(), settings=Settings(wording="terse"))
