"""A Decider's fitted heads: what a head reads, fitting one, and whether one may answer a request.

Functions over a ``Decider`` (the class delegates ``fit``, ``features``, ``prompt_sha256`` and
``check_heads`` here), so the object every integration holds stays a thin shell:

    features      rows → per row and option order: hidden state h at the answer position (n·R, H),
                  zero-shot p in class order (n·R, C), the row index (CV groups)
    fit           features → ``head_regression.fit_head`` → a ``FittedHead`` with its identity
    prompt_sha256 a question's prompt identity (placeholder state; label mode, debias)
    check_heads   refuse a head fitted for another model, export, prompt or reading

The head itself is ``fitted.py``; the regression maths ``head_regression.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .calibration import FixedCalibration
from .compiler import CompiledRequest, Compiler, LabelMode, resolve_label_mode
from .debias import Debias, rotation_shifts
from .errors import InvalidRequestError
from .fitted import FitReport, FittedHead
from .head_regression import check_rows_per_class, fit_head
from .readout_plan import Readout
from .schema import DecisionRequest, Example, Question, json_sha256, option_keys, parse_question, parse_request
from .settings import Settings

if TYPE_CHECKING:
    from .answers import QuestionHead

__all__ = ["PROMPT_INSTRUCTIONS", "PROMPT_STATE", "Decider", "check_heads", "features", "fit", "heads_debias",
           "prompt_sha256", "reads_mid_layers", "resolve_layers", "row_answer", "stack_states"]

PROMPT_STATE = "<state>"  # the placeholder state a prompt's identity is compiled with (prompt_sha256)
PROMPT_INSTRUCTIONS = "<instructions>"  # and the placeholder question text of a head fitted on rows' own texts


class Decider(Protocol):
    """What these functions use of a ``decider.Decider`` (so this module never imports it): its
    name and identity, its compiler, how it resolves a request's settings, and one engine call."""

    name: str
    compiler: Compiler
    engine: Any

    @property
    def model_key(self) -> str: ...
    @property
    def export_sha256(self) -> str: ...
    def settings(self, request: DecisionRequest | None = None, *, label_mode: LabelMode | None = None,
                 debias: Debias | None = None) -> Settings: ...
    def read(self, compiled: Sequence[CompiledRequest], *, share_prefixes: bool = True, use_cache: bool = True,
             label_mass: Sequence[bool] = (), hidden: Sequence[bool] = ()) -> list[list[Readout]]: ...


def _wire_examples(examples: Sequence[Example | Mapping[str, Any]]) -> list[Any]:
    return [e.model_dump(mode="json", exclude_none=True) if isinstance(e, Example) else e for e in examples]


def row_answer(row: Mapping[str, Any], i: int, classes: Sequence[str]) -> int:
    """A row's gold class index; refuses a row without a label or with one not among the options.

    >>> row_answer({"state": "x", "answer": True}, 0, ["yes", "no"])
    0
    """
    if "answer" not in row or row["answer"] is None:
        raise InvalidRequestError(f"rows[{i}] has no 'answer' (the option it should get)", ("rows", i, "answer"))
    raw = row["answer"]
    key = ("yes" if raw else "no") if isinstance(raw, bool) else str(raw)
    if key not in classes:
        raise InvalidRequestError(f"rows[{i}].answer: {raw!r} is not an option of the question ({list(classes)})",
                                  ("rows", i, "answer"))
    return list(classes).index(key)


def prompt_sha256(decider: Decider, question: Question | Mapping[str, Any], classes: Sequence[str] | None = None, *,
                  label_mode: LabelMode | None = None, debias: Debias | None = None,
                  examples: Sequence[Example | Mapping[str, Any]] | None = None,
                  own_instructions: bool = False) -> str:
    """The identity of a question's prompt: sha256 of its token ids (system text, template,
    examples, question text, options in ``classes`` order with their labels) compiled with a
    placeholder state, and the label mode and debias it was read with. ``own_instructions``:
    the question text is a placeholder too (a head fitted on rows that each ask their own)."""
    q = question if isinstance(question, Mapping) else question.model_dump(mode="json", exclude_none=True)
    if own_instructions:
        q = {**q, "instructions": PROMPT_INSTRUCTIONS}
    if classes is not None and q.get("type") == "choice":
        crit = q["criteria"]
        q = {**q, "criteria": {c: crit[c] for c in classes}}
    body: dict[str, Any] = {"model": decider.name, "state": PROMPT_STATE, "questions": {"q": q}}
    if examples:
        body["examples"] = _wire_examples(examples)
    req = parse_request(body)
    comp = decider.compiler.compile(req, settings=decider.settings(req, label_mode=label_mode, debias=debias))
    (cq,) = comp.questions
    return json_sha256({"prompt": list(comp.prefix_ids + cq.suffix_ids), "labels": cq.label_mode,
                        "paths": [list(p) for p in cq.label_paths.paths], "debias": comp.debias})


def check_heads(decider: Decider, request: DecisionRequest | Mapping[str, Any],
                heads: Mapping[str, QuestionHead], *, label_mode: LabelMode | None = None,
                debias: Debias | None = None, settings: Settings | None = None) -> None:
    """Refuse (InvalidRequestError at ``heads.<question>``) a head that was fitted for another
    model, export, prompt or reading of its question than this request's. ``settings``: the
    request's, already resolved (else resolved from ``label_mode`` and ``debias``). A fixed
    calibration (a preset's) was chosen for this reading already (``presets.selection``)."""
    req = parse_request(request)
    s = settings or decider.settings(req, label_mode=label_mode, debias=debias)
    for name, head in heads.items():
        if name not in req.questions:
            raise InvalidRequestError(f"{name!r} is not a question of the request ({list(req.questions)})",
                                      ("heads", name))
        if isinstance(head, FixedCalibration):
            continue
        q = req.questions[name]
        try:
            head.order(option_keys(q))
        except ValueError as e:
            raise InvalidRequestError(str(e), ("heads", name)) from None
        why = head.refusal(model=decider.model_key, export_sha256=decider.export_sha256,
                           prompt_sha256=prompt_sha256(decider, q, head.classes, label_mode=s.label_mode,
                                                       debias=s.debias, examples=req.examples,
                                                       own_instructions=head.own_instructions),
                           labels=resolve_label_mode(q.type, s.label_mode), debias=s.debias, wording=s.wording)
        missing = [k for k in head.mid_layers if k not in decider.engine.hidden_layers]
        if not why and missing:  # only a hand-edited head: an export's layers are part of its hash
            why = (f"it reads the states after layers {missing}, which this export does not output (it outputs "
                   f"{list(decider.engine.hidden_layers)})")
        if why:
            raise InvalidRequestError(f"the fitted head cannot answer this question: {why}", ("heads", name))


def features(decider: Decider, question: Question | Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
             rotations: int = 1, label_mode: LabelMode | None = None, debias: Debias | None = None,
             examples: Sequence[Example | Mapping[str, Any]] | None = None, batch: int = 16,
             progress: bool = False, layers: bool = False) -> tuple[np.ndarray, ...]:
    """What a head reads, per row and option order (row-major): the hidden state at the answer
    position (n·R, H), the zero-shot probabilities in the question's option order (n·R, C),
    and each line's row index (the CV groups). ``rotations`` R: the options listed from the
    ``j·C/R``-th on (choice only). ``layers=True`` adds a fourth array, the mid-layer states
    there (n·R, L, H), L = ``engine.hidden_layers`` (an error for an export without them)."""
    from tqdm.auto import tqdm

    q = parse_question(question)
    classes = option_keys(q)
    dumped = q.model_dump(mode="json", exclude_none=True)
    shifts = [j * len(classes) // rotations for j in range(rotations)]
    bodies, groups = [], []
    for i, row in enumerate(rows):
        if "state" not in row:
            raise InvalidRequestError(f"rows[{i}] has no 'state'", ("rows", i, "state"))
        for shift in shifts:
            qd = dict(dumped)
            if shift:
                names = classes[shift:] + classes[:shift]
                qd["criteria"] = {c: dumped["criteria"][c] for c in names}
            if row.get("instructions") is not None:
                qd["instructions"] = row["instructions"]
            body: dict[str, Any] = {"model": decider.name, "state": row["state"], "questions": {"q": qd}}
            if examples:
                body["examples"] = _wire_examples(examples)
            bodies.append(body)
            groups.append(i)
    if layers:
        decider.engine.require_layers()
    hidden, probs, mids = [], [], []
    for at in tqdm(range(0, len(bodies), batch), desc="features", unit="batch", disable=not progress):
        parsed = [parse_request(b) for b in bodies[at : at + batch]]
        compiled = [decider.compiler.compile(r, settings=decider.settings(r, label_mode=label_mode, debias=debias))
                    for r in parsed]
        for (r,) in decider.read(compiled, share_prefixes=True, use_cache=True, hidden=[True] * len(compiled),
                                 layers=layers):
            assert r.hidden is not None
            idx = [list(r.question.options).index(c) for c in classes]
            hidden.append(r.hidden.astype(np.float64))  # (H,)
            probs.append(r.probabilities()[idx])        # (C,) class order
            mids.append(r.layers)                       # (L, H) with layers
    out = (np.stack(hidden), np.stack(probs), np.asarray(groups))
    return (*out, np.stack(mids).astype(np.float64)) if layers else out


def resolve_layers(available: Sequence[int], layers: str | Sequence[int | str] = "auto") -> list[int | str]:
    """The states a head reads (``FittedHead.layers``): "last" (``fit``'s default: on the dev bench
    the last hidden state alone measured best at 8 rows per option, docs/evaluation.md "Fitted
    heads"); "auto" — the export's deepest mid layer (the graph builder's default outputs are n/2
    and 2n/3 of n layers) and the last, or the last alone for an export without mid layers; or a
    list of layer counts and "last" (each mid layer must be among ``available``, the export's).

    >>> resolve_layers((14, 18)), resolve_layers(()), resolve_layers((14, 18), [18, "last"])
    ([18, 'last'], ['last'], [18, 'last'])
    """
    if layers == "auto":
        if not available:
            return ["last"]
        return [max(available), "last"]
    want: list[int | str] = ["last"] if layers == "last" else [k if k == "last" else int(k) for k in layers]
    missing = [k for k in want if k != "last" and k not in available]
    if missing:
        raise InvalidRequestError(f"layers: the export outputs the states after layers {list(available)}, not "
                                  f"{missing} ('last' is always there)", ("layers",))
    return want


def stack_states(last: np.ndarray, mids: np.ndarray | None, layer_ids: Sequence[int],
                 which: Sequence[int | str]) -> np.ndarray:
    """Rows' states concatenated as a head reads them: ``last`` (n, H), ``mids`` (n, L, H) in
    ``layer_ids`` order → (n, H · len(which)) (``Readout.state`` for many rows)."""
    parts = [last if k == "last" else mids[:, list(layer_ids).index(int(k))]  # type: ignore[index]
             for k in which]
    return np.concatenate(parts, axis=1).astype(np.float64)


def fit(decider: Decider, question: Question | Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
        rotations: int | None = None, label_mode: LabelMode | None = None, debias: Debias | None = None,
        examples: Sequence[Example | Mapping[str, Any]] | None = None, components: int = 256,
        layers: str | Sequence[int | str] = "last", method: str = "anchored", class_weight: str = "balanced",
        prior: str | Sequence[float] = "rows", folds: int = 5, batch: int = 16,
        calibrate: str = "none", progress: bool = False, command: str = "") -> FittedHead:
    """Fit a head for ``question`` on labelled ``rows`` ``{"state", "answer", "instructions"?}``
    (``answer``: an option key — choice: its name; score: a level number; noul: yes/no or a
    bool; ``instructions``: the row's own question text). Each row is read once (``features``).
    A choice question is read under ``debias="canonical"`` unless told otherwise: one prompt
    for every listing of its options, so the head answers the same whatever order a caller
    lists them in, at one read per row. Under another debias, choice rows are read under
    ``rotations`` cyclic option orders (default every rotation, at most ``MAX_ROTATIONS``), so
    the head learns the options, not their places.
    ``layers``: the states the head reads (``resolve_layers``); ``method``: "anchored" (starts
    from the zero-shot reading and stays there unless the rows justify moving) or "free"
    (``head_regression.py``). ``prior``: the class frequencies of the task where the head
    answers — "rows" (the rows' own: they were sampled as answers occur), "uniform", or one
    frequency per option (when the rows were not sampled as the answers occur, e.g. k per
    class); ``calibrate="temperature"`` divides the head's logits by the temperature that fits
    its cross-validated predictions. Needs scikit-learn (``head_regression.py``); errors name
    the row and field. The report's ``cv_gain`` says whether the head beat the zero-shot reading
    on held-out rows (``HeadFit.worse_than_zero_shot``; ``typed-decisions fit`` refuses to write a
    head that did not, unless forced)."""
    q = parse_question(question)
    classes = option_keys(q)
    gold = [row_answer(row, i, classes) for i, row in enumerate(rows)]
    check_rows_per_class(gold, classes)
    if debias is None and q.type == "choice" and rotations is None and decider.settings().debias == "none":
        debias = "canonical"
    s = decider.settings(label_mode=label_mode, debias=debias)  # the rows' requests set no debias of their own
    canonical = s.debias == "canonical"
    which = resolve_layers(decider.engine.hidden_layers, layers)
    if q.type != "choice":
        n_orders = 1
    elif rotations is None:
        n_orders = 1 if canonical else len(rotation_shifts(len(classes)))
    else:
        n_orders = rotations
    if n_orders < 1:
        raise ValueError(f"rotations must be >= 1, got {rotations}")
    if n_orders > 1 and canonical:
        raise ValueError(f"rotations={rotations} would read each row {rotations} times the same prompt: under "
                         "debias='canonical' the options are shown in one order whatever the listing; use rotations=1")
    mid = any(k != "last" for k in which)
    hidden, probs, groups, *mids = features(decider, q, rows, rotations=n_orders, label_mode=s.label_mode,
                                            debias=s.debias, examples=examples, batch=batch, progress=progress,
                                            layers=mid)
    states = stack_states(hidden, mids[0] if mid else None, decider.engine.hidden_layers, which)
    y = np.repeat(np.asarray(gold), n_orders)
    result = fit_head(states, probs, y, components=components, method=method,  # type: ignore[arg-type]
                      class_weight=class_weight, prior=prior, folds=folds,  # type: ignore[arg-type]
                      groups=groups if n_orders > 1 else None, calibrate=calibrate)  # type: ignore[arg-type]
    own = any(row.get("instructions") is not None for row in rows)
    counts = np.bincount(np.asarray(gold), minlength=len(classes))
    report = FitReport(rows=len(rows), rows_per_class={c: int(k) for c, k in zip(classes, counts)},
                       components=result.components, l2=None if np.isinf(result.l2) else result.l2, folds=result.folds,
                       cv_accuracy=result.cv_accuracy, cv_nll=result.cv_nll,
                       zero_shot_cv_accuracy=result.zero_shot_accuracy, rotations=n_orders,
                       cv_gain=None if result.cv_gain is None else [round(x, 4) for x in result.cv_gain],
                       method=result.method, zero_shot_cv_nll=result.zero_shot_cv_nll,
                       class_weight=class_weight, prior=prior if isinstance(prior, str) else [float(x) for x in prior],  # type: ignore[arg-type]
                       temperature=round(result.temperature, 6), seconds=round(result.seconds, 3),
                       date=time.strftime("%Y-%m-%d"), command=command)
    return FittedHead(
        question_type=q.type, classes=classes, model=decider.model_key, export_sha256=decider.export_sha256,
        prompt_sha256=prompt_sha256(decider, q, classes, label_mode=s.label_mode, debias=s.debias, examples=examples,
                                    own_instructions=own), own_instructions=own,
        rows_sha256=json_sha256([{k: row[k] for k in ("state", "answer", "instructions") if k in row}
                                 for row in rows]),
        labels=resolve_label_mode(q.type, s.label_mode), debias=s.debias, wording=s.wording, layers=which,
        mean=result.mean, scale=result.scale, weights=result.weights, bias=result.bias, fitted=report)


def reads_mid_layers(heads: Mapping[str, QuestionHead] | None) -> bool:
    """Whether a fitted head among ``heads`` reads a mid-layer state (the engine keeps them then)."""
    return any(isinstance(h, FittedHead) and h.mid_layers for h in (heads or {}).values())


def heads_debias(heads: Mapping[str, QuestionHead] | None) -> Debias | None:
    """The debias the fitted heads among ``heads`` were fitted under, when they agree: a request
    that sets none of its own is read that way (``fit`` reads choice rows canonically), so the
    head answers the question as it learned it. None: no fitted head, or heads that disagree
    (``check_heads`` then names the one that cannot answer)."""
    modes = {h.debias for h in (heads or {}).values() if isinstance(h, FittedHead)}
    return modes.pop() if len(modes) == 1 else None
