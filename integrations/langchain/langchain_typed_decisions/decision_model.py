"""LangChain's standard decision-model class, ``langchain_core.decisions.BaseDecisionModel``, on
typed-decisions: ``LocalDecisionModel`` (a ``Decider`` in this process) and
``RemoteDecisionModel`` (a typed-decisions server, URL + key).

Both take ``ClassifierRequest`` = ``{"state": ..., "questions": {name: Noul | Choice | Score}}``
and return ``ClassifierResponse`` with usage; the base class handles callbacks, tracing and
token usage. The request goes the way every Runnable of this package goes — the same backend
(``typed_decisions.client``: ``Decider.run_many`` locally, ``POST /v1/systemone`` remotely) —
translated once in (``to_wire``) and once out (``from_wire``)::

    ClassifierRequest ─ to_wire ─▶ System One request ─ backend.run_many ─▶ DecisionResponse
                      ─ from_wire ─▶ ClassifierResponse

``batch`` / ``abatch`` send every input in ONE backend call (one engine pass locally; answers
equal to one by one). ``Box`` questions are refused by name: the engine reads text only, and so
are media blocks in the state. State: text as is; LangChain messages (one, or a list) as one
``role: text`` line each (as ``DecisionRunnable`` renders them); other JSON values as they are,
with messages inside them as ``{"role", "content"}`` objects.

>>> model = LocalDecisionModel(decider="tiny")                                      # doctest: +SKIP
>>> model.invoke({"state": "I was charged twice.", "questions": {
...     "team": Choice(instructions="Which team?", criteria={"billing": None, "tech": None})}})  # doctest: +SKIP
ClassifierResponse(model='smollm2-135m', answers={'team': ChoiceAnswer(...)}, usage={...})
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.decisions import BaseDecisionModel, Box, ClassifierRequest, ClassifierResponse
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, model_validator
from typed_decisions.client import DEFAULT_TIMEOUT_S
from typed_decisions.schema import ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer

from ._base import PROVIDER, _ROLES, render_messages
from .backends import DecisionBackend, make_backend

_MEDIA = {"image", "image_url", "input_image", "audio", "video", "file"}


def _message(m: BaseMessage) -> dict[str, Any]:
    role = getattr(m, "role", None) if m.type == "chat" else _ROLES.get(m.type, m.type)
    return {"role": role, "content": m.text}


def _json(value: Any, where: str) -> Any:
    """A JSON value with messages as ``{"role", "content"}``; media blocks refused by path."""
    if isinstance(value, BaseMessage):
        return _message(value)
    if isinstance(value, Mapping):
        if value.get("type") in _MEDIA:
            raise ValueError(f"{where}: a {value.get('type')!r} block; typed-decisions runs a text-only model, "
                             "so media are not read: send text or JSON")
        return {str(k): _json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{where}: a {type(value).__name__} is not JSON; send text, JSON values or LangChain messages")


def to_state(state: Any) -> Any:
    """The System One state of a ``State``.

    >>> from langchain_core.messages import HumanMessage
    >>> to_state([HumanMessage("refund?")]), to_state({"ticket": HumanMessage("hi")})
    ('user: refund?', {'ticket': {'role': 'user', 'content': 'hi'}})
    """
    if isinstance(state, BaseMessage):
        state = [state]
    if isinstance(state, (list, tuple)) and state and all(isinstance(m, BaseMessage) for m in state):
        return render_messages(state)
    if isinstance(state, str):
        return state
    return _json(state, "state")


def _content(value: Any, where: str) -> Any:
    """A description as System One holds one: text or a JSON object / array (a bare number or
    boolean as its JSON text; None stays None)."""
    value = _json(value, where)
    if value is None or isinstance(value, (str, dict, list)):
        return value
    return json.dumps(value)


def to_wire(request: ClassifierRequest, model: str) -> dict[str, Any]:
    """A ``ClassifierRequest`` as a System One request (raises ValueError naming a ``Box``)."""
    questions: dict[str, Any] = {}
    for name, q in dict(request["questions"]).items():
        where = f"questions[{name!r}]"
        if isinstance(q, Box) or getattr(q, "type", None) == "box":
            raise ValueError(f"question {name!r} is a Box (locate something in an image): typed-decisions runs a "
                             "text-only model; ask a Noul, Choice or Score question instead")
        wire: dict[str, Any] = {"type": q.type, "instructions": _content(q.instructions, where + ".instructions")}
        if q.type == "noul" and q.criteria is not None:
            wire["criteria"] = {k: _content(v, f"{where}.criteria.{k}")
                                for k, v in (("true", q.criteria.true), ("false", q.criteria.false)) if v is not None}
        elif q.type == "choice":
            wire["criteria"] = {k: _content(v, f"{where}.criteria.{k}") for k, v in q.criteria.items()}
        elif q.type == "score":
            wire["criteria"] = [_content(v, f"{where}.criteria[{i}]") for i, v in enumerate(q.criteria)]
        questions[name] = wire
    return {"model": model, "state": to_state(request["state"]), "questions": questions}


def from_wire(response: DecisionResponse) -> ClassifierResponse:
    """A System One response as a ``ClassifierResponse`` (score keys as ints; usage with totals)."""
    answers: dict[str, Any] = {}
    for name, a in response.answers.items():
        if isinstance(a, NoulAnswer):
            answers[name] = {"type": "noul", "noul": a.noul}
        elif isinstance(a, ChoiceAnswer):
            answers[name] = {"type": "choice", "choice": a.choice, "probabilities": a.probabilities,
                             "confidence": a.confidence}
        else:
            assert isinstance(a, ScoreAnswer)
            answers[name] = {"type": "score", "score": a.score, "confidence": a.confidence,
                             "legend": {int(k): v for k, v in a.legend.items()},
                             "probabilities": {int(k): p for k, p in a.probabilities.items()}}
    tokens = response.usage.input_tokens
    return ClassifierResponse.model_validate({
        "model": response.model, "answers": answers,
        "usage": {"input_tokens": tokens, "output_tokens": response.usage.output_tokens,
                  "total_tokens": tokens + response.usage.output_tokens}})


class _TypedDecisionModel(BaseDecisionModel):
    """What both models share: the translation and one backend call per batch."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    model: str = ""
    """The model name put on every request (local: the export's name unless given)."""

    _backend: DecisionBackend = PrivateAttr()

    @property
    def _provider(self) -> str:
        return PROVIDER

    @property
    def backend(self) -> DecisionBackend:
        return self._backend

    # -- one request

    def _classify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        (response,) = self._backend.run_many([to_wire({"state": state, "questions": questions}, self.model)])
        return from_wire(response)

    async def _aclassify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        (response,) = await self._backend.arun_many([to_wire({"state": state, "questions": questions}, self.model)])
        return from_wire(response)

    # -- a batch: one backend call; a bad input fails alone

    def _prepare(self, inputs: Sequence[ClassifierRequest]) -> tuple[list[Any], list[dict[str, Any]], list[int]]:
        out: list[Any] = [None] * len(inputs)
        wire, where = [], []
        for i, request in enumerate(inputs):
            try:
                wire.append(to_wire(request, self.model))
                where.append(i)
            except (TypeError, ValueError, KeyError) as e:
                out[i] = e
        return out, wire, where

    def _run(self, inputs: list[ClassifierRequest], run_manager: Any = None) -> list[Any]:
        out, wire, where = self._prepare(inputs)
        try:
            responses: list[Any] = self._backend.run_many(wire) if wire else []
        except Exception:  # noqa: BLE001 - one request's error: answer each alone to find whose
            responses = []
            for w in wire:
                try:
                    responses.append(self._backend.run_many([w])[0])
                except Exception as e:  # noqa: BLE001 - handed to that input
                    responses.append(e)
        for i, r in zip(where, responses):
            out[i] = r if isinstance(r, Exception) else from_wire(r)
        return out

    async def _arun(self, inputs: list[ClassifierRequest], run_manager: Any = None) -> list[Any]:
        out, wire, where = self._prepare(inputs)
        try:
            responses: list[Any] = await self._backend.arun_many(wire) if wire else []
        except Exception:  # noqa: BLE001
            responses = []
            for w in wire:
                try:
                    responses.append((await self._backend.arun_many([w]))[0])
                except Exception as e:  # noqa: BLE001
                    responses.append(e)
        for i, r in zip(where, responses):
            out[i] = r if isinstance(r, Exception) else from_wire(r)
        return out

    def batch(self, inputs: list[ClassifierRequest], config: RunnableConfig | list[RunnableConfig] | None = None,
              *, return_exceptions: bool = False, **kwargs: Any) -> list[ClassifierResponse]:
        """Every input in ONE backend call (one engine pass locally: shared prefixes computed once)."""
        if not inputs:
            return []
        configs = [self._traced_config(c) for c in get_config_list(config, len(inputs))]
        return self._batch_with_config(self._run, inputs, configs, return_exceptions=return_exceptions,
                                       run_type="llm", **kwargs)

    async def abatch(self, inputs: list[ClassifierRequest], config: RunnableConfig | list[RunnableConfig] | None = None,
                     *, return_exceptions: bool = False, **kwargs: Any) -> list[ClassifierResponse]:
        if not inputs:
            return []
        configs = [self._traced_config(c) for c in get_config_list(config, len(inputs))]
        return await self._abatch_with_config(self._arun, inputs, configs, return_exceptions=return_exceptions,
                                              run_type="llm", **kwargs)


class LocalDecisionModel(_TypedDecisionModel):
    """A decision model on a ``typed_decisions.decider.Decider`` in this process.

    Args:
        decider: a ``Decider``, an export directory or a catalogue name (``"tiny"``,
            ``"default"``), loaded once per process and shared.
        model: the name reported on answers and traces (default: the export's).
    """

    decider: Any = Field(exclude=True)
    """A ``Decider``, the path of an exported model directory or a catalogue name."""

    @model_validator(mode="after")
    def _build_backend(self) -> LocalDecisionModel:
        if self.decider is None:
            raise ValueError("LocalDecisionModel needs decider= (a Decider, an export directory or a catalogue "
                             "name); for a server use RemoteDecisionModel(base_url=...)")
        self._backend = make_backend(decider=self.decider)
        if not self.model:
            self.model = self._backend.name
        return self


class RemoteDecisionModel(_TypedDecisionModel):
    """A decision model on a typed-decisions server (``POST {base_url}/v1/systemone``).

    Args:
        base_url: the server, e.g. ``http://localhost:8000``.
        model: the model name sent (``GET /v1/models`` lists them; ``jev-latest`` by default).
        api_key: Bearer key; default: the ``TYPED_DECISIONS_API_KEY`` environment variable.
        timeout: seconds per HTTP request (default 120: a loaded CPU server answers in tens of seconds).
        client_kwargs: extra arguments for ``httpx.Client`` / ``httpx.AsyncClient``.
    """

    base_url: str
    """The typed-decisions server."""
    model: str = "jev-latest"
    api_key: SecretStr | None = Field(default=None, exclude=True)
    """Bearer key; defaults to ``TYPED_DECISIONS_API_KEY``. Never shown by ``repr``."""
    timeout: float = DEFAULT_TIMEOUT_S
    client_kwargs: dict[str, Any] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="after")
    def _build_backend(self) -> RemoteDecisionModel:
        self._backend = make_backend(base_url=self.base_url, model=self.model,
                                     api_key=self.api_key.get_secret_value() if self.api_key else None,
                                     timeout=self.timeout, client_kwargs=self.client_kwargs)
        return self


__all__ = ["LocalDecisionModel", "RemoteDecisionModel", "from_wire", "to_state", "to_wire"]
