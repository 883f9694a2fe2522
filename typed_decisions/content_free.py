"""Content-free probabilities p_cf for the contextual calibration of a Decider's file, read once.

p_cf is what the model answers about a content-free state (the file's ``content_free_state``,
e.g. "N/A"): it depends on the question and how it is read (label mode, debias), not on the
request's state. So each question's p_cf is read once and kept (``ContentFreeCache``): a router
asking the same question of every message pays for it on the first message only. A request with
few-shot examples shows every question's example turns before each question, so its p_cf is read
from the whole request (questions and examples) with the content-free state, and kept per question
under that request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from .schema import DecisionRequest
from .settings import Settings

__all__ = ["ContentFreeCache", "content_free_probabilities"]

Read = Callable[[DecisionRequest, Settings], dict[str, np.ndarray]]  # a request's p by question name


class ContentFreeCache:
    """A bounded least-recently-used map key → p_cf, safe across threads (the server's engine
    thread and in-process callers share one Decider).

    >>> c = ContentFreeCache(maxsize=1)
    >>> c.put("a", np.ones(2)); c.put("b", np.zeros(2)); c.get("a") is None, c.get("b").tolist()
    (True, [0.0, 0.0])
    """

    def __init__(self, maxsize: int = 1024):
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> np.ndarray | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: Hashable, value: np.ndarray) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def content_free_probabilities(req: DecisionRequest, settings: Settings, cache: ContentFreeCache,
                               read: Read) -> dict[str, np.ndarray] | None:
    """p_cf of each of ``req``'s questions whose type the file calibrates contextually (None: no
    such question, or no file). ``read`` answers a request under settings (one engine call)."""
    cal = settings.calibration
    if cal is None:
        return None
    wanted = {n: q for n, q in req.questions.items() if cal.for_type(q.type).contextual}
    if not wanted:
        return None
    state = cal.content_free_state or ""
    reading = (settings.label_mode, settings.debias, state)
    out: dict[str, np.ndarray] = {}
    if req.examples:
        cf_req = req.model_copy(update={"state": state, "include": None})
        body = cf_req.model_dump_json()
        hits = {n: cache.get((*reading, body, n)) for n in wanted}
        if any(h is None for h in hits.values()):
            read_now = read(cf_req, settings)
            for n in wanted:
                hits[n] = read_now[n]
                cache.put((*reading, body, n), read_now[n])
        return {n: p for n, p in hits.items() if p is not None}
    for name, q in wanted.items():
        key = (*reading, q.model_dump_json())
        hit = cache.get(key)
        if hit is None:
            hit = read(DecisionRequest(model=req.model, state=state, questions={name: q}), settings)[name]
            cache.put(key, hit)
        out[name] = hit
    return out
