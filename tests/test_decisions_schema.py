"""The published body of ``POST /v1/decisions`` (``server/decisions_schema.py``) against the spec.

The oracle is the ``openai`` package: pydantic derives a JSON schema from its own TypedDict,
``openai.types.decision_create_params.DecisionCreateParams``, with nothing of ours in between. Both
schemas are reduced to their shape (``_shape``: the fields, which are required, types, consts and
enums, with ``$ref`` resolved; titles, descriptions, defaults and length bounds dropped, since ours
add prose and the spec's bounds), then compared part by part, so a field missing, misnamed, made
required or given another type fails naming the part, and finally whole. Fast tier: no model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from td_optional import require

openai = require("openai", "pip install 'typed-decisions-runtime[test]'")
require("fastapi", "pip install 'typed-decisions-runtime[server]'")

from fastapi.testclient import TestClient  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from td_fakes import FakeDecider  # noqa: E402
from typed_decisions.schema import DecisionRequest  # noqa: E402
from typed_decisions.server import create_app  # noqa: E402
from typed_decisions.server.decisions_schema import DecisionCreateParams  # noqa: E402

IGNORED = {"title", "description", "default", "minItems", "maxItems", "minLength", "maxLength"}


def _shape(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON schema reduced to what a client must send: objects as {"properties", "required"},
    a union as the sorted list of its alternatives' shapes, ``"any"`` for an unconstrained value.

    >>> _shape({"anyOf": [{"type": "string"}, {"$ref": "#/$defs/A"}], "title": "X"},
    ...        {"A": {"properties": {"n": {"type": "integer"}}, "required": ["n"], "type": "object"}})
    ['string', {'properties': {'n': 'integer'}, 'required': ['n']}]
    """
    if node is True or node == {}:
        return "any"
    node = {k: v for k, v in node.items() if k not in IGNORED}
    if "$ref" in node:
        return _shape(defs[node.pop("$ref").rsplit("/", 1)[1]], defs)
    if "anyOf" in node or "oneOf" in node:
        alternatives = [_shape(a, defs) for a in node.get("anyOf", node.get("oneOf"))]
        if "any" in alternatives:  # Optional[object]: anything at all
            return "any"
        return sorted(alternatives, key=lambda s: json.dumps(s, sort_keys=True))
    if "const" in node:
        return {"const": node["const"]}
    if "enum" in node:
        return {"enum": sorted(node["enum"], key=str)}
    kind = node.get("type")
    if kind == "array":
        return {"array": _shape(node.get("items", {}), defs)}
    if kind == "object" and "properties" not in node:
        return {"map": _shape(node.get("additionalProperties", {}), defs)}
    if kind == "object":
        return {"properties": {k: _shape(v, defs) for k, v in node["properties"].items()},
                "required": sorted(node.get("required", []))}
    assert kind in ("string", "boolean", "integer", "number", "null"), node
    return kind


def _schema(root: dict[str, Any]) -> Any:
    return _shape(root, root.get("$defs", {}))


OURS = _schema(DecisionCreateParams.model_json_schema())
SPEC = _schema(TypeAdapter(openai.types.decision_create_params.DecisionCreateParams).json_schema())


def _alternatives(union: Any, field: str = "type") -> dict[Any, Any]:
    """A union of objects (or one object) keyed by a field's const (``type`` of a question, a part)."""
    out = {}
    for alt in [union] if isinstance(union, dict) else union:
        props = alt["properties"]
        key = props[field]["const"] if field in props else None
        assert key not in out, f"two alternatives with {field}={key!r}"
        out[key] = alt
    return out


def _array(union: Any) -> Any:
    """The items of a ``str | list[...]`` field (``input``, ``content``, ``instructions``)."""
    (array,) = [s for s in union if s != "string"]
    return array["array"]


def _items(schema: Any) -> dict[tuple[str, str | None], Any]:
    """The input array's items by (type, role): messages by role, tool items by type."""
    out = {}
    for alt in _array(schema["properties"]["input"]):
        props = alt["properties"]
        out[(props["type"]["const"], props.get("role", {}).get("const"))] = alt
    return out


def test_the_spec_is_the_one_this_module_was_written_from():
    """3.63 added the Decisions API; a new major version may reshape it (the test extra pins <4)."""
    assert int(openai.__version__.split(".")[0]) == 3 and tuple(map(int, openai.__version__.split(".")[:2])) >= (3, 63)


def test_top_level_fields_and_required():
    assert set(OURS["properties"]) == set(SPEC["properties"]) == {
        "input", "model", "questions", "prompt_cache_key", "prompt_cache_options", "safety_identifier"}
    assert OURS["required"] == SPEC["required"] == ["input", "model", "questions"]
    for field in SPEC["properties"]:
        assert OURS["properties"][field] == SPEC["properties"][field], field


def test_question_types_with_their_fields_required_and_enums():
    ours = _alternatives(OURS["properties"]["questions"]["array"])
    spec = _alternatives(SPEC["properties"]["questions"]["array"])
    assert set(ours) == set(spec) == {"predicate", "choice", "score"}
    for kind in spec:
        assert ours[kind]["required"] == spec[kind]["required"], kind
        assert set(ours[kind]["properties"]) == set(spec[kind]["properties"]), kind
        assert ours[kind] == spec[kind], kind
    choice = ours["choice"]["properties"]["choices"]["array"]
    assert choice["required"] == ["value"] and choice["properties"]["value"] == ["boolean", "string"]
    assert ours["score"]["properties"]["levels"]["array"]["required"] == ["label"]
    parts = _alternatives(_array(ours["predicate"]["properties"]["instructions"]))
    assert set(parts) == {"input_text", "input_image", "input_json"}
    assert parts["input_image"]["properties"]["detail"] == ["null", {"enum": ["auto", "high", "low", "original"]}]


def test_input_item_kinds_roles_and_their_parts():
    ours, spec = _items(OURS), _items(SPEC)
    assert set(ours) == set(spec) == {
        ("message", "user"), ("message", "developer"), ("message", "system"), ("message", "assistant"),
        ("function_call", None), ("function_call_output", None), ("custom_tool_call", None),
        ("custom_tool_call_output", None)}
    for key in spec:
        assert ours[key]["required"] == spec[key]["required"], key
        assert set(ours[key]["properties"]) == set(spec[key]["properties"]), key
        assert ours[key] == spec[key], key

    def part_types(item: Any, field: str) -> set[str]:
        return set(_alternatives(_array(item["properties"][field])))

    assert part_types(ours[("message", "user")], "content") == {"input_text", "input_image", "input_json"}
    assert part_types(ours[("message", "system")], "content") == {"input_text"}
    assert part_types(ours[("message", "assistant")], "content") == {"output_text", "refusal"}
    assert part_types(ours[("function_call_output", None)], "output") == {"input_text", "input_image"}
    assert ours[("message", "assistant")]["properties"]["phase"] == ["null", {"enum": ["commentary", "final_answer"]}]
    assert ours[("function_call", None)]["properties"]["status"] == [
        "null", {"enum": ["completed", "in_progress", "incomplete"]}]


def test_the_whole_shape_equals_the_spec():
    assert OURS == SPEC


def test_the_shape_would_see_a_misnamed_field():
    """The comparison is not vacuous: the spec with one field renamed is told apart."""
    renamed = json.loads(json.dumps(SPEC).replace('"safety_identifier"', '"safety_id"'))
    assert renamed != OURS


def test_openapi_names_the_body_of_post_v1_decisions():
    with TestClient(create_app(FakeDecider("fake-model"))) as client:
        schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/decisions"]["post"]["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/DecisionCreateParams"}
    components = schema["components"]["schemas"]
    assert _shape(components["DecisionCreateParams"], components) == SPEC
    # System One's bodies kept theirs (the two sets of definitions share one namespace)
    for path in ("/v1/systemone", "/v1/explain"):
        assert schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/DecisionRequest"}
    system_one = DecisionRequest.model_json_schema(ref_template="#/components/schemas/{model}")["$defs"]
    assert all(components[name] == definition for name, definition in system_one.items())


def test_openapi_names_every_error_of_post_v1_decisions_in_openais_shape():
    """Each status the door can send (errors.HTTP_STATUS, with its 422 sent as 400) names the error
    body; that body's shape is the ``openai`` package's ``ErrorObject`` (less its optional
    ``misalignment``, which this server never sends); and a real 400 validates against both."""
    from typed_decisions.errors import HTTP_STATUS
    from typed_decisions.server.decisions_schema import DECISION_ERROR_STATUSES, DecisionErrorBody

    sent = {400 if s == 422 else s for s in HTTP_STATUS.values()}
    assert set(DECISION_ERROR_STATUSES) == sent
    spec = _schema(openai.types.shared.ErrorObject.model_json_schema())
    spec["properties"].pop("misalignment")
    assert _schema(DecisionErrorBody.model_json_schema())["properties"]["error"] == spec
    with TestClient(create_app(FakeDecider("fake-model"))) as client:
        schema = client.get("/openapi.json").json()
        refused = client.post("/v1/decisions", json={"model": "fake-model", "input": "hi", "questions": []})
    responses = schema["paths"]["/v1/decisions"]["post"]["responses"]
    ref = {"$ref": "#/components/schemas/DecisionErrorBody"}
    assert {int(s) for s in responses if s != "200"} == sent
    assert all(responses[str(s)]["content"]["application/json"]["schema"] == ref for s in sent)
    assert refused.status_code == 400
    body = DecisionErrorBody.model_validate(refused.json())
    assert body.error.param == "questions" and body.error.type == "invalid_request_error"
    openai.types.shared.ErrorObject.model_validate(refused.json()["error"])
