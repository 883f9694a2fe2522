"""One batch of queued requests answered where the model is: ``Job`` and ``answer_jobs``.

``service.py`` queues a ``Job`` per request; ``answer_jobs`` is what the engine thread does with a
batch of them, written once for every place a ``Decider`` runs: the local server's engine thread
(``Service.run_jobs``) and, behind Ray Serve, each Decider replica (``integrations/ray``: the
ingress holds no model, so it hands its batch on as Jobs and the replica answers them here)::

    explain jobs ─ one by one ─▶ Decider.explain
    /v1/decisions jobs (set_aside) ─ set_aside.prepare: refused questions set aside, the prefix
                                     cache's share read ─▶ what survives, then as the others
                                     (a decider without a compiler: set aside as it answers,
                                     set_aside.answer_alone, job by job once a batch fails)
    the rest ─ one Decider.run_many per label mode present (one call in all, usually) ─▶ answers

Why the set-aside runs beside the model and not in the ingress: it compiles with the Decider's own
compiler and reads its prefix cache, just before the call (``set_aside.py``); a stand-in for a
remote model has neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..answers import QuestionHead
from ..compiler import LabelMode
from ..schema import DecisionRequest
from .set_aside import Answered, answer_alone, prepare


@dataclass(frozen=True)
class Job:
    """One queued request: the parsed wire request, the label mode to compile it with (None: the
    decider's own; presets may ask for another), and whether to explain it (``/v1/explain``)."""

    request: DecisionRequest
    label_mode: LabelMode | None = None
    explain: bool = False
    heads: Mapping[str, QuestionHead] | None = None  # a preset's head or fixed calibration, by question name
    set_aside: bool = False  # /v1/decisions: refuse unanswerable questions alone (set_aside.py)


def answer_jobs(decider: Any, jobs: Sequence[Job]) -> list[Any]:
    """Each job's answer, in order, from a ``Decider`` on this thread: an ``Explanation`` for an
    explain job, ``set_aside.Answered`` for a set-aside one, else a ``DecisionResponse``. Raises
    the first error (the caller's ``answer_each`` re-runs the jobs alone to find whose it is)."""
    if len(jobs) == 1 and jobs[0].set_aside and getattr(decider, "compiler", None) is None:
        return [_alone(decider, jobs[0])]
    out: list[Any] = [None] * len(jobs)
    for i, job in enumerate(jobs):
        if job.explain:
            kwargs = {} if job.label_mode is None else {"label_mode": job.label_mode}
            out[i] = decider.explain(job.request, **kwargs)
    # set aside, and read the prefix cache's share, before the call (which restores every request
    # before it stores any: what a request finds there does not depend on its batch-mates)
    prepared = {i: prepare(decider, j.request, j.label_mode) for i, j in enumerate(jobs) if j.set_aside}
    requests = [prepared[i].request if i in prepared else j.request for i, j in enumerate(jobs)]
    for mode in dict.fromkeys(j.label_mode for j in jobs if not j.explain):
        idx = [i for i, j in enumerate(jobs) if j.label_mode == mode and not j.explain and requests[i] is not None]
        if not idx:
            continue
        kwargs: dict[str, Any] = {} if mode is None else {"label_mode": mode}
        if any(jobs[i].heads for i in idx):
            kwargs["heads"] = [jobs[i].heads for i in idx]
        for i, response in zip(idx, decider.run_many([requests[i] for i in idx], **kwargs)):
            out[i] = response
    for i, p in prepared.items():
        out[i] = Answered(out[i], p)
    return out


def _alone(decider: Any, job: Job) -> Answered:
    """A ``/v1/decisions`` job on a decider without a compiler (any object with ``run_many``): its
    refusals are found by answering (``set_aside.answer_alone``), each try answered as any job is
    here. A batch with one fails whole and comes back job by job (``batching.answer_each``), so
    the others stay batched."""
    return answer_alone(lambda r: answer_jobs(decider, [replace(job, request=r, set_aside=False)])[0], job.request)


__all__ = ["Job", "answer_jobs"]
