"""``TypedDecisionsLM``: a DSPy LM that answers DSPy's decision protocol with typed-decisions.

DSPy 3.4's ``Predict`` checks ``lm.supports_decision_requests``; when True, its decision adapter
(``dspy/adapters/decision.py``) sends every output as a System One question and calls
``lm(state=..., questions=...)`` / ``await lm.acall(...)``, then decodes the answers itself
(thresholds, Score cuts, Choice weights: what ``ReAnchor`` fits). This class is the ``lm`` end of
that call, the same contract as ``dspy.experimental.TypeSafe``:

    request ─ DSPy cache? ─ backend (local Decider / remote server) ─ answers
            {"noul"} / {"choice", "confidence", "probabilities"} / {"score", "confidence", "probabilities"}

Like other DSPy LMs it uses ``dspy.cache`` (key: provider, model, backend identity, state,
questions), records ``history`` (``inspect_history`` works), reports usage to DSPy's usage
tracker and runs callbacks. It never generates text: generation settings (temperature,
max_tokens, n, ...) are refused, and so are plain prompt/messages calls.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import dspy
from dspy.clients.base_lm import LM_CLASS_STATE_KEY, BaseLM, record_history
from dspy.dsp.utils.settings import settings
from dspy.utils.callback import BaseCallback, with_callbacks

from typed_decisions.client import DEFAULT_TIMEOUT_S
from typed_decisions.fitted import FittedHead
from typed_decisions.schema import json_sha256

from .backends import DecisionBackend, make_backend

PROVIDER = "typed-decisions"
_ANSWER_KEYS = ("noul", "score", "choice", "confidence", "probabilities")
_TEXT_CALL = ("TypedDecisionsLM only answers typed decisions (noul / choice / score outputs "
              "through dspy.Predict); it never generates text. Use a decision signature "
              "(bool, Literal[...], dspy.experimental.Noul / Choice / Score outputs) or another LM "
              "for text.")


def _refuse_settings(settings_: Mapping[str, Any], where: str) -> None:
    if settings_:
        raise ValueError(f"TypedDecisionsLM got generation settings {sorted(settings_)} in {where}: it "
                         "reads label probabilities after the prompt and never samples, so "
                         "temperature, max_tokens, n and the like are refused, not ignored. Remove them.")


class TypedDecisionsLM(BaseLM):
    """Run DSPy programs with typed outputs on a typed-decisions model.

    ``dspy.configure(lm=TypedDecisionsLM("exports/tiny"))``, then ``dspy.Predict`` with ``bool``,
    ``Literal[...]`` or ``dspy.experimental.Noul / Choice / Score`` outputs.

    Args:
        decider: a ``typed_decisions.decider.Decider``, an exported model directory (loaded once per
            process) or a ``DecisionBackend``; or leave it out and give ``base_url``.
        base_url: a typed-decisions server (``POST {base_url}/v1/systemone``).
        model: remote mode: the model name sent on every request.
        api_key: remote mode: Bearer key (default: ``TYPED_DECISIONS_API_KEY``); never saved.
        timeout: remote mode: seconds per HTTP request (default 120, typed_decisions.client.DEFAULT_TIMEOUT_S:
            fits CPU latency under load; see docs/deploy.md).
        client_kwargs: remote mode: extra ``httpx.Client`` / ``AsyncClient`` arguments.
        cache: use DSPy's cache (identical requests are answered from it).
        callbacks: DSPy callbacks for this LM.
    """

    supports_decision_requests = True

    def __init__(self, decider: Any = None, *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 client_kwargs: Mapping[str, Any] | None = None, cache: bool = True,
                 callbacks: list[BaseCallback] | None = None, **generation: Any):
        _refuse_settings(generation, "TypedDecisionsLM(...)")
        self._init = {"decider": decider, "base_url": base_url, "model": model, "api_key": api_key,
                      "timeout": timeout, "client_kwargs": client_kwargs}
        self.backend: DecisionBackend = make_backend(**self._init)
        super().__init__(self.backend.name, model_type="decision", cache=cache, callbacks=callbacks)
        self.kwargs: dict[str, Any] = {}  # no default generation settings: Predict reads these
        self.base_url = base_url
        self.timeout = timeout
        # fitted heads (``fit``) by the canonical hash of the wire question they answer
        self.heads: dict[str, FittedHead] = {}
        self._record: list[tuple[Any, dict[str, Any]]] | None = None  # ``fit``'s recording pass

    def __repr__(self) -> str:
        where = f"base_url={self.base_url!r}" if self.base_url else "local"
        return f"TypedDecisionsLM(model={self.model!r}, {where})"

    # -- the decision protocol

    def _request(self, state: Any, questions: Mapping[str, Any]) -> dict[str, Any]:
        """The DSPy cache key: everything that changes the answers (fitted heads included), never
        the API key."""
        key = {"provider": PROVIDER, "model": self.model,
               "backend": getattr(self.backend, "cache_key", type(self.backend).__name__),
               "state": state, "questions": dict(questions)}
        heads = self._heads_for(questions)
        if heads:
            key["heads"] = {name: head.id for name, head in heads.items()}
        return key

    def _heads_for(self, questions: Mapping[str, Any]) -> dict[str, FittedHead]:
        """The fitted heads of these questions: a head answers exactly the wire question it was fitted on."""
        if not self.heads:
            return {}
        return {name: self.heads[h] for name, q in questions.items() if (h := json_sha256(q)) in self.heads}

    def _run(self, request: dict[str, Any]) -> Any:
        heads = self._heads_for(request["questions"])
        if heads:
            (answer,) = self.backend.run_many([self._wire(request)], heads=[heads])  # type: ignore[call-arg]
        else:
            (answer,) = self.backend.run_many([self._wire(request)])
        return answer

    # -- fitting on a trainset

    def fit(self, program: Any, trainset: Sequence[Any], **kwargs: Any) -> TypedDecisionsLM:
        """A copy of this LM whose questions are answered by heads fitted on ``trainset``
        (``Decider.fit``: the hidden state at the answer position and the zero-shot log-probs;
        docs/evaluation.md, "Fitted heads"). ``program`` (a ``dspy.Predict``, ``TypedPredict`` or
        any module) is run once on each example's inputs with this LM, recording the questions
        DSPy's decision adapter sends; each output field an example labels gives a row to the
        question of that name. A head then answers exactly that wire question (same signature,
        instructions and demos); other questions stay zero-shot. A local decider only;
        ``kwargs`` go to ``Decider.fit`` (``rotations``, ``prior``, ...)."""
        decider = getattr(self.backend, "decider", None)
        if decider is None or not hasattr(decider, "fit"):
            raise TypeError("TypedDecisionsLM.fit needs a local decider; a server answers fitted presets at "
                            "/v1/presets/{name} (typed-decisions fit, serve --preset)")
        recorder = self.copy(cache=False)
        asked: dict[str, dict[str, Any]] = {}
        rows: dict[str, list[dict[str, Any]]] = {}
        for example in trainset:
            recorder._record = []
            with dspy.context(lm=recorder):
                program(**example.inputs())
            for state, questions in recorder._record:
                for name, question in questions.items():
                    if name not in example.labels():
                        continue
                    key = json_sha256(question)
                    asked[key] = question
                    rows.setdefault(key, []).append({"state": state, "answer": _option(question, example[name])})
        if not rows:
            raise ValueError("fit: no example labels an output of the questions the program asked")
        new = self.copy()
        new.heads = {**self.heads, **{key: decider.fit(asked[key], named, **kwargs) for key, named in rows.items()}}
        return new

    @staticmethod
    def _check(state: Any, questions: Any, extra: Mapping[str, Any]) -> None:
        if questions is None or extra.keys() & {"prompt", "messages"}:
            raise NotImplementedError(_TEXT_CALL)
        _refuse_settings(extra, "the call")

    def _finish(self, request: dict[str, Any], response: dict[str, Any], cache_hit: bool
                ) -> dict[str, dict[str, Any]]:
        if self.cache and not cache_hit:
            dspy.cache.put(request, response)
        usage = {} if cache_hit else {"prompt_tokens": response["usage"]["input_tokens"],
                                      "completion_tokens": response["usage"]["output_tokens"]}
        if settings.usage_tracker and usage:
            settings.usage_tracker.add_usage(response["model"], usage)
        answers = {name: {k: a[k] for k in _ANSWER_KEYS if k in a}
                   for name, a in response["answers"].items()}
        if not settings.disable_history:
            record_history(self, {
                "request": copy.deepcopy(request), "response": copy.deepcopy(response),
                "usage": usage, "cache_hit": cache_hit, "model": response["model"],
                "messages": None, "prompt": json.dumps({"state": request["state"],
                                                        "questions": request["questions"]}),
                "outputs": [json.dumps(answers)],
            })
        return copy.deepcopy(answers)

    def _wire(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"model": self.model, "state": request["state"], "questions": request["questions"]}

    @with_callbacks
    def __call__(self, state: Any = None, questions: Mapping[str, Any] | None = None,
                 **extra: Any) -> dict[str, dict[str, Any]]:
        """Answer the questions DSPy's decision adapter built for a predictor."""
        self._check(state, questions, extra)
        if self._record is not None:
            self._record.append((state, dict(questions)))  # type: ignore[arg-type]
        request = self._request(state, questions)  # type: ignore[arg-type]
        response = dspy.cache.get(request) if self.cache else None
        cache_hit = response is not None
        if response is None:
            response = self._run(request).model_dump(mode="json")
        return self._finish(request, response, cache_hit)

    @with_callbacks
    async def acall(self, state: Any = None, questions: Mapping[str, Any] | None = None,
                    **extra: Any) -> dict[str, dict[str, Any]]:
        """Async ``__call__`` (a local engine runs in a worker thread)."""
        self._check(state, questions, extra)
        if self._record is not None:
            self._record.append((state, dict(questions)))  # type: ignore[arg-type]
        request = self._request(state, questions)  # type: ignore[arg-type]
        response = dspy.cache.get(request) if self.cache else None
        cache_hit = response is not None
        if response is None:
            heads = self._heads_for(request["questions"])
            if heads:
                (answer,) = await self.backend.arun_many([self._wire(request)], heads=[heads])  # type: ignore[call-arg]
            else:
                (answer,) = await self.backend.arun_many([self._wire(request)])
            response = answer.model_dump(mode="json")
        return self._finish(request, response, cache_hit)

    def forward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError(_TEXT_CALL)

    async def aforward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError(_TEXT_CALL)

    # -- DSPy's LM housekeeping

    def copy(self, **kwargs: Any) -> TypedDecisionsLM:
        """A new LM on the same backend (engine shared), with empty history."""
        allowed = {"cache", "callbacks"}
        if unknown := sorted(kwargs.keys() - allowed):
            raise TypeError(
                f"TypedDecisionsLM.copy() got {unknown}: it gives one answer per question and never "
                "samples, so modules that draw several samples (dspy.BestOfN, dspy.Refine, "
                "rollout_id/temperature) do not fit it.")
        new = copy.copy(self)
        new.history = []
        new.callbacks = list(kwargs.get("callbacks", self.callbacks))
        new.cache = kwargs.get("cache", self.cache)
        new.kwargs = {}
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> TypedDecisionsLM:
        # Optimizers deep-copy programs; an ONNX session or HTTP client cannot (and need not) be
        # copied, so the copy shares the backend.
        return self

    def dump_state(self) -> dict[str, Any]:
        """Reconstruction settings: the export directory (when given as a path) or the server;
        never the API key."""
        decider = self._init["decider"]
        return {LM_CLASS_STATE_KEY: f"{type(self).__module__}.{type(self).__qualname__}",
                "decider": str(decider) if isinstance(decider, (str, bytes)) or hasattr(decider, "__fspath__") else None,
                "base_url": self.base_url, "model": self._init["model"], "timeout": self.timeout,
                "cache": self.cache}

    @classmethod
    def load_state(cls, state: dict[str, Any], **_: Any) -> TypedDecisionsLM:
        state = {k: v for k, v in state.items() if k != LM_CLASS_STATE_KEY}
        if state.get("decider") is None and state.get("base_url") is None:
            raise ValueError("this TypedDecisionsLM was saved with an in-memory Decider; pass the "
                             "export directory (decider='path') to save a program that can be reloaded")
        return cls(**state)


def _option(question: Mapping[str, Any], label: Any) -> Any:
    """An example's label as the option key a head is fitted on: a noul's bool as is, a score's
    level (an int, a Score-like ``.level``, or a level's text) as its number, a choice's value."""
    if question.get("type") == "score":
        level = getattr(label, "level", label)
        if isinstance(level, str) and level in question.get("criteria", []):
            level = question["criteria"].index(level)
        return str(level)
    return getattr(label, "value", label) if question.get("type") == "choice" and not isinstance(label, str) else label


__all__ = ["TypedDecisionsLM"]
