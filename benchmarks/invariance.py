"""One answer per request, as a probe any benchmark or test can run on any export: the largest
difference of request A's probabilities in each company (a batch with an unrelated or a
prefix-sharing request, other questions about the same state, cold or after a warm prefix cache,
long states that begin alike, and through the HTTP server under 16 concurrent clients) from A alone
on a cold engine (``deviations``). tests/td_invariance.py holds it to 1e-5 on the tiny model
(tests/test_engine_invariance.py) and the default model (tests/export/test_export_default_slow.py);
studies/packed_int8.py reports it for packed and unpacked INT8.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from typed_decisions.decider import Decider
from typed_decisions.schema import DecisionResponse

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing and payments": "Charges, refunds, invoices",
                          "technical support": "Bugs, crashes, outages", "sales": "New plans, quotes"}},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "severity": {"type": "score", "instructions": "How severe is it?", "criteria": ["low", "medium", "high", "critical"]},
}
A = "I was charged twice for my subscription this month. Please refund the duplicate charge today."
B = "Do you offer a discount for schools that buy forty licences at once?"
C = "I was charged twice for my subscription this month. Also, the app crashes when I open invoices."


# Other questions about the same state: its nodes up to the state are shared with A's, the rest not.
OTHER = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing and payments": "Charges, refunds, invoices", "sales": "New plans, quotes"}},
}


def request(state: str, model: str = "m", questions: dict[str, Any] = QUESTIONS) -> dict[str, Any]:
    return {"model": model, "state": state, "questions": questions}


def vector(answers: dict[str, Any]) -> np.ndarray:
    """Every probability of a response (wire JSON or DecisionResponse), in a fixed order."""
    if isinstance(answers, DecisionResponse):
        answers = answers.model_dump(mode="json")["answers"]
    out = []
    for name in sorted(answers):
        a = answers[name]
        out += [a["noul"]] if "noul" in a else list(a["probabilities"].values())
    return np.array(out)


def deviations(d: Decider, url: str | None = None) -> dict[str, float]:
    """max |dp| of request A in each company against A alone from a cold engine."""
    d.engine.clear_cache()
    alone = vector(d.run_many([request(A)], use_cache=False)[0])
    ways = {
        "batch with an unrelated request": lambda: d.run_many([request(A), request(B)], use_cache=False)[0],
        "batch with a prefix-sharing request": lambda: d.run_many([request(C), request(A)], use_cache=False)[1],
        "batch with other questions on the same state":
            lambda: d.run_many([request(A, questions=OTHER), request(A)], use_cache=False)[1],
        "after a prefix-sharing request warmed the cache": lambda: (d.engine.clear_cache(), d.run(request(C)), d.run(request(A)))[2],
        "again, from the cache": lambda: d.run(request(A)),
        "batched, with the cache warm": lambda: d.run_many([request(B), request(A), request(C)])[1],
    }
    out = {name: float(np.abs(vector(way()) - alone).max()) for name, way in ways.items()}
    out["long states that begin alike, batched (worst of four)"] = max(begin_alike(d).values())
    if url is not None:
        out["HTTP, 16 concurrent clients"] = max(float(np.abs(vector(a) - alone).max()) for a in http_answers(url, d.name))
    return out


def begin_alike(d: Decider) -> dict[str, float]:
    """max |dp| per state of four ~250-token tickets in one call (template head cached) against
    each alone from a cold engine. Three begin with the same tokens ("Ticket #1" of "Ticket #11."
    and "Ticket #12."): W5 over HTTP on Zen 5 found such states cut where they part, each into two
    blocks, which moved INT8 answers by 0.02-0.06 (docs/METHOD.md, "One answer per request")."""
    states = [f"Ticket #{k}. " + " ".join([s, B, C, A] * 3) for k, s in [(1, A), (11, C), (12, B), (2, A)]]
    d.engine.clear_cache()
    alone = [vector(d.run_many([request(s)], use_cache=False)[0]) for s in states]
    d.run(request(B))  # caches the template head, as any earlier request does
    together = d.run_many([request(s) for s in states])
    return {s[:11]: float(np.abs(vector(t) - a).max()) for s, t, a in zip(states, together, alone)}


def http_answers(url: str, model: str, clients: int = 16) -> list[dict[str, Any]]:
    """16 clients at once, each sending A, B or C; returns A's answers."""
    import httpx

    states = [A if i % 2 == 0 else (B if i % 4 == 1 else C) for i in range(clients)]

    def post(state: str) -> dict[str, Any]:
        r = httpx.post(f"{url}/v1/systemone", json=request(state, model), timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["answers"]

    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(post, states))
    return [a for a, s in zip(answers, states) if s == A]
