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
    ({"model": "m", "questions": {"u": {"type": "noul", "instructions": "x"}}}, ("state",), "Field required"),
    ({"model": "m", "state": "s", "questions": {"u": {"type": "noul", "instructions": "x"}}, "temperature": 0.7}, (), "sampling parameter"),
    ({"model": "m", "state": "s", "questions": {"u": {"type": "noul", "instructions": "x"}}, "assets": {"x": {"type": "image"}}}, ("assets",), "multimodal"),
    ({"model": "m", "state": "s", "questions": {}}, ("questions",), "at least one question"),
    ({"model": "m", "state": "s", "questions": {"u": {"type": "noul", "instructions": "x"}}, "colour": 1}, ("colour",), "Extra inputs"),
    (req(where={"type": "box", "instructions": "the cat"}), ("questions", "where"), "text-only model"),
])
def test_errors_name_the_field(payload, loc, fragment):
    err = error_of(payload)
    assert err.loc == loc
    assert fragment in err.msg


def test_sampling_parameter_inside_question_is_refused():
    err = error_of(req(u={"type": "noul", "instructions": "x", "top_p": 0.9}))
    assert err.loc == ("questions", "u") and "top_p" in err.msg


def test_x_extension_fields_pass_and_are_not_read():
    """The spec's extension namespace: x_* at the top level is accepted (and not read); every
    other unknown field is still refused (the list above)."""
    r = parse_request({**req(u={"type": "noul", "instructions": "x"}), "x_trace": {"id": 7}, "x_client": "sdk"})
    assert list(r.questions) == ["u"] and "x_trace" not in r.model_dump()
    err = error_of({**req(u={"type": "noul", "instructions": "x", "x_note": 1})})  # not inside a question
    assert err.loc == ("questions", "u", "x_note")


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


# --- few-shot examples (issue #14, lever 6) ---------------------------------------------------------
FEW = {"team": {"type": "choice", "criteria": {"billing": None, "tech": None}},
       "sev": {"type": "score", "criteria": ["low", "high"]}, "u": {"type": "noul", "instructions": "Urgent?"}}


def with_examples(examples):
    return {"model": "m", "state": "s", "questions": FEW, "examples": examples}


def test_valid_examples_parse_and_absent_examples_stay_absent():
    r = parse_request(with_examples([{"state": {"a": 1}, "answers": {"team": "tech", "sev": "1", "u": "no"}},
                                     {"state": "x", "answers": {"u": "yes"}, "instructions": {"u": "Angry?"}}]))
    assert [e.answers for e in r.examples] == [{"team": "tech", "sev": "1", "u": "no"}, {"u": "yes"}]
    assert parse_request(req(**FEW)).examples is None


@pytest.mark.parametrize("examples,loc,fragment", [
    ([{"state": "x", "answers": {"nope": "tech"}}], ("examples", 0, "answers", "nope"), "not a question"),
    ([{"state": "x", "answers": {"team": "sales"}}], ("examples", 0, "answers", "team"), "not an option of question 'team'"),
    ([{"state": "x", "answers": {"u": "maybe"}}], ("examples", 0, "answers", "u"), "'yes', 'no'"),
    ([{"state": "x", "answers": {"sev": "high"}}], ("examples", 0, "answers", "sev"), "level numbers"),
    ([{"state": "x", "answers": {"team": "tech"}}, {"state": "y", "answers": {"sev": "2"}}],
     ("examples", 1, "answers", "sev"), "'0', '1'"),
    ([{"state": "x", "answers": {"team": 1}}], ("examples", 0, "answers", "team"), "valid string"),
    ([{"state": "x", "answers": {}}], ("examples", 0, "answers"), "at least 1 item"),
    ([{"answers": {"team": "tech"}}], ("examples", 0, "state"), "Field required"),
    ([{"state": "x", "answers": {"team": "tech"}, "gold": "tech"}], ("examples", 0, "gold"), "Extra inputs"),
    ({"state": "x"}, ("examples",), "valid list"),
    ([{"state": "x", "answers": {"team": "tech"}, "instructions": {"u": "Angry?"}}],
     ("examples", 0, "instructions", "u"), "no answer to it"),
])
def test_example_errors_name_the_field(examples, loc, fragment):
    err = error_of(with_examples(examples))
    assert err.loc == loc
    assert fragment in err.msg
