"""``FakeDecider``: the Decider's interface with deterministic probabilities (no model, no ORT).

The one fake of the test suite (server, schemathesis, LangChain and DSPy tests). An option whose
name appears in the state gets ``boost`` added to its logit; every option gets a small jitter
hashed from (state, question, option). Answers are built by the core's own reducers, so they are
real wire models. It behaves like ``Decider`` where the tests need it to:

- ``calls`` records the size of every ``run_many`` call, so a test can check that a batch is ONE
  engine call; ``label_modes`` the ``label_mode`` each call was given (None: the default);
- compilation errors come first, before any "engine" work: a choice option named ``<boundary>``
  raises ``TokenizerBoundaryError``, a state over ``max_state_chars`` ``ContextTooLongError``;
- ``gate`` (set by default) holds the "engine" while cleared, ``entered`` says a call reached it,
  ``fail_with`` makes the engine step raise, ``delay`` makes it slow;
- ``engine.stats`` counts tokens and cache misses like ``EngineStats`` (for /metrics).

Importable from every test as ``td_fakes``: pytest puts tests/ on sys.path for tests/conftest.py.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from typed_decisions import reducers
from typed_decisions.decider import parse_request
from typed_decisions.errors import ContextTooLongError, TokenizerBoundaryError
from typed_decisions.schema import DecisionRequest, DecisionResponse, NoulAnswer, Usage, render_content


def _jitter(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32 * 0.2  # [0, 0.2)


@dataclass
class FakeStats:
    """The ``EngineStats`` counters the server's /metrics reads."""

    calls: int = 0
    tokens_computed: int = 0
    tokens_logical: int = 0
    cache_hits: int = 0
    cache_misses: int = 0


class FakeDecider:
    """Deterministic stand-in for ``typed_decisions.decider.Decider`` (no model, no ORT)."""

    def __init__(self, name: str = "fake", boost: float = 3.0, *, delay: float = 0.0,
                 max_state_chars: int = 2000):
        self.name = name
        self.boost = boost
        self.delay = delay
        self.max_state_chars = max_state_chars
        self.calls: list[int] = []  # number of requests of each run_many call that reached the engine
        self.label_modes: list[str | None] = []
        self.engine = SimpleNamespace(stats=FakeStats())
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_with: Exception | None = None

    def probabilities_for(self, state: str, qname: str, options: Sequence[str]) -> np.ndarray:
        """softmax(boost·[option named in state] + jitter(state, question, option)), (k,)."""
        low = state.lower()
        z = np.array([(self.boost if o.lower() in low else 0.0) + _jitter(state, qname, o)
                      for o in options])                                   # (k,)
        e = np.exp(z - z.max())
        return e / e.sum()

    def _compile(self, r: DecisionRequest) -> None:
        """The errors the real compiler raises before any engine work."""
        if isinstance(r.state, str) and len(r.state) > self.max_state_chars:
            raise ContextTooLongError("the prompt is too long", ("questions", next(iter(r.questions))))
        for name, q in r.questions.items():
            if q.type == "choice" and "<boundary>" in q.criteria:
                raise TokenizerBoundaryError("label '<boundary>' merges with the next token",
                                             ("questions", name, "criteria", "<boundary>"))

    def _answer(self, req: DecisionRequest) -> DecisionResponse:
        state = render_content(req.state)
        answers: dict[str, Any] = {}
        for name, q in req.questions.items():
            if q.type == "noul":
                answers[name] = NoulAnswer(noul=float(self.probabilities_for(state, name, ["yes", "no"])[0]))
            elif q.type == "choice":
                answers[name] = reducers.reduce_choice(self.probabilities_for(state, name, list(q.criteria)),
                                                       list(q.criteria))
            else:
                levels = [render_content(c) for c in q.criteria]
                answers[name] = reducers.reduce_score(self.probabilities_for(state, name, levels), q.criteria)
        tokens = len(state.split()) * len(req.questions)
        stats = self.engine.stats
        stats.tokens_logical += tokens
        stats.tokens_computed += tokens // 2
        stats.cache_misses += 1
        return DecisionResponse(model=self.name, answers=answers,
                                usage=Usage(input_tokens=max(tokens, 1), output_tokens=0))

    def run_many(self, requests: Sequence[Any], *, label_mode: str | None = None, **_: Any) -> list[DecisionResponse]:
        parsed = [parse_request(r) for r in requests]
        for r in parsed:  # "compile" first, as the real decider does
            self._compile(r)
        self.entered.set()
        self.gate.wait(10)
        if self.fail_with is not None:
            raise self.fail_with
        time.sleep(self.delay)
        self.calls.append(len(parsed))
        self.label_modes.append(label_mode)
        self.engine.stats.calls += 1
        return [self._answer(r) for r in parsed]

    def explain(self, request: Any, **kw: Any) -> DecisionResponse:
        """Stands in for ``Decider.explain`` on ``/v1/explain``: the answers without the why (the
        fast tests check the route's plumbing; the tiny model's tests check explanations)."""
        return self.run_many([request], **kw)[0]

    def run(self, request: Any, **kw: Any) -> DecisionResponse:
        return self.run_many([request], **kw)[0]

    def decide(self, state: Any, questions: Mapping[str, Any], **kw: Any) -> DecisionResponse:
        qs = {k: v.model_dump(exclude_none=True) if hasattr(v, "model_dump") else v
              for k, v in questions.items()}
        return self.run({"model": self.name, "state": state, "questions": qs}, **kw)
