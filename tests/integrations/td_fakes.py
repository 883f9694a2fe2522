"""``FakeDecider``: the Decider's interface with deterministic probabilities (no model, no ORT).

An option whose name appears in the state gets ``boost`` added to its logit; every option gets a
small jitter hashed from (state, question, option). Answers are built by the core's own reducers,
so they are real wire models. Every ``run_many`` call's size is recorded in ``calls``, so tests can
check that a batch is ONE engine call. Importable from tests as ``td_fakes`` (pytest puts
tests/integrations on sys.path when it loads the conftest beside this file).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from typed_decisions import reducers
from typed_decisions.decider import parse_request
from typed_decisions.schema import DecisionResponse, NoulAnswer, Usage, render_content


def _jitter(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32 * 0.2  # [0, 0.2)


class FakeDecider:
    """Deterministic stand-in for ``typed_decisions.decider.Decider`` (no model, no ORT)."""

    def __init__(self, name: str = "fake", boost: float = 3.0):
        self.name = name
        self.boost = boost
        self.calls: list[int] = []  # number of requests of each run_many call

    def _probs(self, state: str, qname: str, options: Sequence[str]) -> np.ndarray:
        low = state.lower()
        z = np.array([(self.boost if o.lower() in low else 0.0) + _jitter(state, qname, o)
                      for o in options])                                   # (k,)
        e = np.exp(z - z.max())
        return e / e.sum()

    def run_many(self, requests: Sequence[Any], **_: Any) -> list[DecisionResponse]:
        self.calls.append(len(requests))
        out = []
        for raw in requests:
            req = parse_request(raw)
            state = render_content(req.state)
            answers: dict[str, Any] = {}
            for name, q in req.questions.items():
                if q.type == "noul":
                    answers[name] = NoulAnswer(noul=float(self._probs(state, name, ["yes", "no"])[0]))
                elif q.type == "choice":
                    answers[name] = reducers.reduce_choice(self._probs(state, name, list(q.criteria)),
                                                           list(q.criteria))
                else:
                    levels = [render_content(c) for c in q.criteria]
                    answers[name] = reducers.reduce_score(self._probs(state, name, levels), q.criteria)
            out.append(DecisionResponse(model=self.name, answers=answers,
                                        usage=Usage(input_tokens=len(state.split()), output_tokens=0)))
        return out

    def run(self, request: Any, **kw: Any) -> DecisionResponse:
        return self.run_many([request], **kw)[0]

    def decide(self, state: Any, questions: Mapping[str, Any], **kw: Any) -> DecisionResponse:
        qs = {k: v.model_dump(exclude_none=True) if hasattr(v, "model_dump") else v
              for k, v in questions.items()}
        return self.run({"model": self.name, "state": state, "questions": qs}, **kw)
