"""Per-question refusals and per-request cache accounting, for ``/v1/decisions``.

System One refuses a whole request (422) when one question cannot be compiled — say a choice
label the tokenizer cannot place at the answer boundary. OpenAI's Decisions API instead answers
the other questions and returns ``{"type": "refusal"}`` for that one. ``prepare`` does this
before the engine sees the request, beside the model (``jobs.answer_jobs``; behind Ray, on the replica)::

    compile the request ─ ok ─▶ answer it
        └ InvalidRequestError located in question k (not a context-length error) ─▶ set k aside,
          compile the rest again (one compile per refused question; the common case is one)

It also reads, from the same compiled request, how many of its prompt tokens the engine's prefix
cache holds right now: ``cached_tokens``, defined per request even inside a micro-batch — an engine
call restores every request's prefix from the cache before it stores anything, so what a request
finds there does not depend on its batch-mates. Nothing here changes the Decider: it compiles
with the Decider's own compiler and settings, and ``run_many`` compiles the surviving request
again (a few milliseconds of tokenizing, against a prefill of the same tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import ContextTooLongError, InvalidRequestError
from ..schema import DecisionRequest

T = TypeVar("T")


@dataclass(frozen=True)
class Prepared:
    """``request`` without its refused questions (None when none is left), the refusals by
    question key with the compiler's reason, and the prefix cache's share of the prompt tokens:
    ``cached_tokens`` counted like ``usage.input_tokens`` (per prompt: the cached prefix once
    per question, rotations included), ``cache_write_tokens`` the prefix tokens this request's
    call stores (once)."""

    request: DecisionRequest | None
    refused: dict[str, str] = field(default_factory=dict)
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Answered:
    """What the engine thread hands back for a ``/v1/decisions`` job: the System One response of
    the answerable questions (None when every question was refused) and ``prepare``'s record."""

    response: Any
    prepared: Prepared


def _question_key(error: InvalidRequestError, request: DecisionRequest) -> str | None:
    """The question an error is located in, if it is one of the request's."""
    loc = error.loc
    if isinstance(error, ContextTooLongError):
        return None  # the state is usually what is too long: the whole request's error
    if len(loc) >= 2 and loc[0] == "questions" and str(loc[1]) in request.questions:
        return str(loc[1])
    return None


def setting_aside(request: DecisionRequest, attempt: Callable[[DecisionRequest], T]
                  ) -> tuple[T | None, DecisionRequest | None, dict[str, str]]:
    """``attempt(request)``, again without each question its ``InvalidRequestError`` is located in,
    until it succeeds or no question is left: (its result, the request it took, the refusals by
    question key with their reasons). An error located elsewhere is raised."""
    refused: dict[str, str] = {}
    while True:
        try:
            return attempt(request), request, refused
        except InvalidRequestError as e:
            key = _question_key(e, request)
            if key is None:
                raise
            refused[key] = e.msg
            rest = {k: q for k, q in request.questions.items() if k != key}
            if not rest:
                return None, None, refused
            request = request.model_copy(update={"questions": rest})


def prepare(decider: Any, request: DecisionRequest, label_mode: Any = None) -> Prepared:
    """Set aside the questions the compiler refuses; read the prefix cache's share. A decider
    without a compiler (a fake, a remote engine) gets the request as is (``answer_alone``)."""
    compiler = getattr(decider, "compiler", None)
    if compiler is None:
        return Prepared(request)
    # the Decider's one resolution of how the request is read (settings.py)
    compiled, request, refused = setting_aside(
        request, lambda r: compiler.compile(r, settings=decider.settings(r, label_mode=label_mode)))
    if request is None:
        return Prepared(None, refused)
    cached, written = cache_share(decider, compiled)
    return Prepared(request, refused, cached, written)


def answer_alone(run: Callable[[DecisionRequest], Any], request: DecisionRequest) -> Answered:
    """One request to a decider without a compiler (a remote engine, a stand-in): it finds the
    refusals only when it answers, so ``run`` is called again without each refused question
    (one call when none is refused)."""
    response, request, refused = setting_aside(request, run)
    return Answered(response, Prepared(request, refused))


def cache_share(decider: Any, compiled: Any) -> tuple[int, int]:
    """(cached_tokens, cache_write_tokens) of a compiled request, from the engine's prefix cache
    as it is now (call it on the engine thread, just before the call)."""
    engine = getattr(decider, "engine", None)
    cache = getattr(engine, "prefix_cache", None)
    points = sorted(p for p in compiled.checkpoints if 0 < p <= len(compiled.prefix_ids))
    if cache is None or not points:
        return 0, 0
    prefix = compiled.prefix_ids
    hit = max((p for p in points if cache.holds(prefix[:p])), default=0)
    prompts = len(compiled.units())
    deepest = points[-1]
    fits = cache.budget > 0 and deepest * engine.backbone.kv_bytes_per_token <= cache.budget
    written = deepest - hit if fits and deepest > hit else 0
    return hit * prompts, written


__all__ = ["Answered", "Prepared", "answer_alone", "cache_share", "prepare", "setting_aside"]
