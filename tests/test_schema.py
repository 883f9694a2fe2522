"""Wire-format validation: field paths in errors, unknown fields and sampling parameters refused."""

from __future__ import annotations

import pytest

from typed_decisions.decider import parse_request
from typed_decisions.errors import InvalidRequestError
from typed_decisions.schema import (ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer, Usage,
                                    render_content)


def req(**questions):
    return {"model": "m", "state": "s", "questions": questions}


def error_of(payload) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as e:
        parse_request(payload)
    return e.value


def test_valid_request_round_trips():
    r = parse_request(req(team={"type": "choice", "criteria": {"a": None, "b": "desc"}},
                          urgent={"type": "noul", "instructions": "Urgent?"},
                          sev={"type": "score", "criteria": ["low", {"level": "high"}]}))
    assert [q.type for q in r.questions.values()] == ["choice", "noul", "score"]
    assert r.questions["team"].criteria == {"a": None, "b": "desc"}


@pytest.mark.parametrize("payload,loc,fragment", [
    (req(team={"type": "choice", "criteria": {}}), ("questions", "team", "criteria"), "at least one option"),
    (req(sev={"type": "score", "criteria": ["only"]}), ("questions", "sev", "criteria"), "at least 2"),
    (req(u={"type": "noul"}), ("questions", "u"), "instructions"),
    (req(u={"type": "noul", "instructions": "x", "colour": 1}), ("questions", "u", "colour"), "Extra inputs"),
    (req(u={"type": "maybe", "instructions": "x"}), ("questions", "u"), "type"),
    ({"model": "m", "questions": {}}, ("state",), "Field required"),
    ({"model": "m", "state": "s", "questions": {}, "temperature": 0.7}, (), "sampling parameter"),
    ({"model": "m", "state": "s", "questions": {}, "assets": {"x": {"type": "image"}}}, ("assets",), "multimodal"),
])
def test_errors_name_the_field(payload, loc, fragment):
    err = error_of(payload)
    assert err.loc == loc
    assert fragment in err.msg


def test_sampling_parameter_inside_question_is_refused():
    err = error_of(req(u={"type": "noul", "instructions": "x", "top_p": 0.9}))
    assert err.loc == ("questions", "u") and "top_p" in err.msg


def test_empty_questions_are_allowed():
    assert parse_request(req()).questions == {}


def test_render_content_is_compact_json_in_key_order():
    assert render_content({"b": 1, "a": [1, "é"]}) == '{"b":1,"a":[1,"é"]}'
    assert render_content("text") == "text"


def test_response_serializes_without_python_only_fields():
    resp = DecisionResponse(model="m", usage=Usage(input_tokens=3), answers={
        "a": NoulAnswer(noul=0.25, calibration="T=2"),
        "b": ChoiceAnswer(choice="x", confidence=0.5, probabilities={"x": 0.75, "y": 0.25}),
        "c": ScoreAnswer(score=0.5, confidence=0.0, legend={"0": "lo", "1": "hi"},
                         probabilities={"0": 0.5, "1": 0.5}),
    })
    wire = resp.model_dump(mode="json")
    assert wire["answers"]["a"] == {"type": "noul", "noul": 0.25}
    assert wire["usage"] == {"input_tokens": 3, "output_tokens": 0}
    assert isinstance(wire["usage"]["input_tokens"], int)
    assert all("type" in a for a in wire["answers"].values())
