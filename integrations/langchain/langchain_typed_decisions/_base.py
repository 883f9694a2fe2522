"""Shared machinery of the decision Runnables: connection fields, input → state, one engine call.

A subclass says which questions it asks (``_questions``) and what it returns (``_convert``); this
base turns inputs into wire requests, sends a whole batch to the backend as one ``run_many`` call,
and wraps every call in LangChain's run/callback bookkeeping with tracing metadata
(``ls_provider="typed-decisions"``, ``ls_model_name``).

Inputs become the state like this (deterministic, so equal inputs hit the prefix cache):

- ``str`` → as is; ``dict`` / ``list`` of plain values → JSON (the core renders it compactly);
- LangChain messages (a message, a list of messages, a ``PromptValue``) → one ``role: text`` line
  per message, roles ``system`` / ``user`` / ``assistant`` / ``tool``;
- ``{"state": ..., "questions": {...}}`` (no other keys) → an explicit state, and questions that
  replace the Runnable's own for this call (``DecisionRunnable`` only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from typing_extensions import Self

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import ensure_config, get_config_list
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, model_validator
from typed_decisions.client import DEFAULT_TIMEOUT_S
from typed_decisions.schema import Content, DecisionResponse

from .backends import DecisionBackend, make_backend

Output = TypeVar("Output")

PROVIDER = "typed-decisions"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
          "function": "tool", "chat": "user"}


def render_messages(messages: Sequence[BaseMessage]) -> str:
    """One ``role: text`` line per message (``ChatMessage`` keeps its own role).

    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> render_messages([HumanMessage("I was charged twice"), AIMessage("Sorry! Order id?")])
    'user: I was charged twice\\nassistant: Sorry! Order id?'
    """
    lines = []
    for m in messages:
        role = getattr(m, "role", None) if m.type == "chat" else _ROLES.get(m.type, m.type)
        lines.append(f"{role}: {m.text}")
    return "\n".join(lines)


def to_state(value: Any) -> Content:
    """The state for an input (see the module docstring). Raises TypeError naming what is accepted.

    >>> to_state({"subject": "Refund"})
    {'subject': 'Refund'}
    """
    if isinstance(value, str):
        return value
    if isinstance(value, PromptValue):
        value = value.to_messages()
    if isinstance(value, BaseMessage):
        value = [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, BaseMessage) for m in value):
        return render_messages(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"cannot use a {type(value).__name__} as a decision state: pass text, a dict, a "
                    "list, LangChain messages or {'state': ..., 'questions': ...}")


def split_input(value: Any) -> tuple[Content, Mapping[str, Any] | None]:
    """``(state, question override or None)``; the envelope is a dict with ``state`` and at most
    ``questions`` besides it, so an ordinary dict state is never mistaken for one."""
    if isinstance(value, Mapping) and "state" in value and set(value) <= {"state", "questions"}:
        return to_state(value["state"]), value.get("questions")
    return to_state(value), None


class DecisionBase(RunnableSerializable[Any, Output]):
    """Connection fields shared by every decision Runnable; exactly one of ``decider`` / ``base_url``."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    decider: Any = Field(default=None, exclude=True)
    """A ``typed_decisions.decider.Decider``, the path of an exported model directory (loaded once
    per process), or a ready ``DecisionBackend`` (to share one between Runnables)."""
    base_url: str | None = None
    """A typed-decisions server (``POST {base_url}/v1/systemone``) instead of a local engine."""
    model: str | None = None
    """Remote mode: the model name sent on every request. Local mode uses the export's name."""
    api_key: SecretStr | None = Field(default=None, exclude=True)
    """Remote mode: Bearer key; defaults to the ``TYPED_DECISIONS_API_KEY`` environment variable."""
    timeout: float = DEFAULT_TIMEOUT_S
    """Remote mode: seconds per HTTP request (default 120: a CPU server under load answers in tens
    of seconds; see docs/deploy.md)."""
    client_kwargs: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """Remote mode: extra arguments for ``httpx.Client`` / ``httpx.AsyncClient`` (e.g. a transport)."""

    heads: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """Fitted heads (``typed_decisions.fitted.FittedHead``) by question name, set by ``fit``: those
    questions are answered by their head (a local decider only)."""

    _backend: DecisionBackend = PrivateAttr()

    @model_validator(mode="after")
    def _build_backend(self) -> DecisionBase[Output]:
        self._backend = make_backend(
            decider=self.decider, base_url=self.base_url, model=self.model,
            api_key=self.api_key.get_secret_value() if self.api_key else None,
            timeout=self.timeout, client_kwargs=self.client_kwargs)
        return self

    @property
    def backend(self) -> DecisionBackend:
        return self._backend

    @property
    def model_name(self) -> str:
        return self._backend.name

    # -- fitting on labelled examples

    def fit(self, examples: Sequence[Any], **kwargs: Any) -> Self:
        """A copy of this Runnable whose questions are answered by heads fitted on ``examples``
        (``Decider.fit``: the hidden state at the answer position and the zero-shot log-probs, a
        logistic head; docs/evaluation.md, "Fitted heads"). An example is ``(input, answer)``
        or ``{"input": ..., "answer": ...}``, its answer what this Runnable's question should give
        (an option name, a bool, a level number) or, for several questions, ``{name: answer}``.
        Only with a local decider (a server answers fitted presets at ``/v1/presets/{name}``);
        ``kwargs`` go to ``Decider.fit`` (``rotations``, ``components``, ...)."""
        decider = getattr(self._backend, "decider", None)
        if decider is None or not hasattr(decider, "fit"):
            raise TypeError(f"{type(self).__name__}.fit needs a local decider (decider=...); a server answers "
                            "fitted presets at /v1/presets/{name} (typed-decisions fit, serve --preset)")
        questions = self._questions(None)
        rows: dict[str, list[dict[str, Any]]] = {}
        for i, example in enumerate(examples):
            value, answer = (example["input"], example["answer"]) if isinstance(example, Mapping) else example
            answers = self._answers(answer)
            unknown = sorted(set(answers) - set(questions))
            if unknown:
                raise ValueError(f"examples[{i}]: {unknown} are not questions of this Runnable ({sorted(questions)})")
            state = self._request(value)["state"]
            for name, a in answers.items():
                rows.setdefault(name, []).append({"state": state, "answer": a})
        heads = {name: decider.fit(questions[name], named, **kwargs) for name, named in rows.items()}
        return self.model_copy(update={"heads": {**self.heads, **heads}})

    def _answers(self, answer: Any) -> dict[str, Any]:
        """An example's answer as {question name: answer} (a Runnable of one question overrides)."""
        if not isinstance(answer, Mapping):
            raise ValueError("an example's answer is {question name: answer} for a Runnable of several questions")
        return dict(answer)

    def _heads_for(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Per request, the fitted heads of the questions it asks (None: no heads at all)."""
        if not self.heads:
            return None
        return [{n: h for n, h in self.heads.items() if n in r["questions"]} for r in requests]

    # -- what a subclass defines

    def _questions(self, override: Mapping[str, Any] | None) -> dict[str, Any]:
        raise NotImplementedError

    def _convert(self, response: DecisionResponse) -> Output:
        raise NotImplementedError

    # -- machinery

    def _request(self, value: Any) -> dict[str, Any]:
        state, override = split_input(value)
        questions = {name: q.model_dump(exclude_none=True) if hasattr(q, "model_dump") else q
                     for name, q in self._questions(override).items()}
        return {"model": self.model_name, "state": state, "questions": questions}

    def _traced(self, config: RunnableConfig | None) -> RunnableConfig:
        """The config with tracing metadata added (caller's metadata wins on conflicts)."""
        config = ensure_config(config)
        meta = {"ls_provider": PROVIDER, "ls_model_name": self.model_name, "ls_model_type": "decision"}
        return {**config, "metadata": {**meta, **config.get("metadata", {})}}

    def _prepare(self, inputs: list[Any]) -> tuple[list[Output | Exception], list[Any], list[int]]:
        """Requests for the valid inputs; a bad input becomes its own error, not the batch's."""
        out: list[Output | Exception] = []
        requests, where = [], []
        for i, value in enumerate(inputs):
            try:
                requests.append(self._request(value))
                where.append(i)
            except (TypeError, ValueError) as e:  # one bad input must not sink the batch
                out.append(e)
            else:
                out.append(None)  # type: ignore[arg-type]  # filled by _fill
        return out, requests, where

    def _fill(self, out: list[Output | Exception], where: list[int], responses: list[Any]
              ) -> list[Output | Exception]:
        for i, response in zip(where, responses):
            out[i] = self._convert(response)
        return out

    def _run(self, inputs: list[Any], run_manager: list[CallbackManagerForChainRun] | None = None,
             ) -> list[Output | Exception]:
        out, requests, where = self._prepare(inputs)
        heads = self._heads_for(requests)
        if heads is None:
            return self._fill(out, where, self._backend.run_many(requests))
        return self._fill(out, where, self._backend.run_many(requests, heads=heads))  # type: ignore[call-arg]

    async def _arun(self, inputs: list[Any],
                    run_manager: list[AsyncCallbackManagerForChainRun] | None = None,
                    ) -> list[Output | Exception]:
        out, requests, where = self._prepare(inputs)
        heads = self._heads_for(requests)
        if heads is None:
            return self._fill(out, where, await self._backend.arun_many(requests))
        return self._fill(out, where, await self._backend.arun_many(requests, heads=heads))  # type: ignore[call-arg]

    def _one(self, value: Any) -> Output:
        (result,) = self._run([value])
        if isinstance(result, Exception):
            raise result
        return result

    async def _aone(self, value: Any) -> Output:
        (result,) = await self._arun([value])
        if isinstance(result, Exception):
            raise result
        return result

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        return self._call_with_config(self._one, input, self._traced(config), **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        return await self._acall_with_config(self._aone, input, self._traced(config), **kwargs)

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None,
              *, return_exceptions: bool = False, **kwargs: Any) -> list[Output]:
        """All inputs in ONE backend call (one engine pass locally: shared prefixes reused)."""
        configs = [self._traced(c) for c in get_config_list(config, len(inputs))]
        return self._batch_with_config(self._run, inputs, configs,
                                       return_exceptions=return_exceptions, **kwargs)

    def as_tool(self, args_schema: Any = None, *, name: str | None = None,  # type: ignore[override]
                description: str | None = None, arg_types: Any = None) -> BaseTool:
        """A tool an agent calls with ``{"state": "..."}``: content is the result as text (JSON for
        answers), the artifact the result itself. See ``tools.DecisionTool``."""
        from .tools import DecisionTool

        if args_schema is not None or arg_types is not None:
            raise ValueError("a decision tool's input is fixed ({'state': str}); drop args_schema= "
                             "and arg_types=")
        return DecisionTool.from_runnable(self, name=name, description=description)

    async def abatch(self, inputs: list[Any],
                     config: RunnableConfig | list[RunnableConfig] | None = None,
                     *, return_exceptions: bool = False, **kwargs: Any) -> list[Output]:
        configs = [self._traced(c) for c in get_config_list(config, len(inputs))]
        return await self._abatch_with_config(self._arun, inputs, configs,
                                              return_exceptions=return_exceptions, **kwargs)
