"""Why an answer is what it is: the prompt, each option's label tokens with their logits, the
probabilities, and the answer, per question.

``Decider.explain`` builds an ``Explanation`` from one engine call (the same readouts that make the
answers); it is the machine form (``decide --explain --json``, ``POST /v1/explain``, the
playground page) and ``render_text`` turns it into a terminal report for people::

    prompt = shared prefix (system + state, computed once, cached across requests)
           ┆ per question: its suffix (the question block), then the label tokens read out

Every number in it can be recomputed from it: an option's probability is the sum over its label
paths of the product, along the path, of the restricted softmax at each trie node (``nodes``
holds each node's children and their logits; a node with one child is not read: probability 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from . import debias as debiasing
from .fitted import FittedHead, head_features
from .readout import path_probabilities
from .readout_plan import Readout, fitted_probabilities
from .schema import Answer, Content, Question, Usage

if TYPE_CHECKING:
    from .reducers import ConfidenceKind

CONFIDENCE_MEANING = {
    "typesafe": "(k·p* − 1)/(k − 1): 0 when the chosen option is no likelier than a uniform pick "
                "among the k options, 1 when it has all the probability",
    "bonsai": "p* · ∏(1 − p_i) over the other options: high only when the chosen option is likely "
              "and every other one unlikely",
    "entropy": "1 − H(p)/ln k: 0 for a uniform distribution over the k options, 1 for a certain one",
}


class LabelToken(BaseModel):
    """One token of a label path: its id, its text, and its logit at the trie node it leaves
    (None when it is the node's only child: it has probability 1 and is not read)."""

    id: int
    text: str
    logit: float | None


class LabelPath(BaseModel):
    """One way the model can say an option (the option's label and its surface variants)."""

    text: str
    tokens: list[LabelToken]
    probability: float = Field(description="product of the restricted softmax along the path")


class OptionExplanation(BaseModel):
    option: str = Field(description="the option's name (choice), level key (score) or yes/no (noul)")
    label: str = Field(description="what the prompt shows for it and the model answers")
    meaning: Content | None = Field(default=None, description="the level text (score) or criterion")
    paths: list[LabelPath]
    probability: float = Field(description="uncalibrated: the sum of its paths, renormalized")
    calibrated_probability: float | None = Field(
        default=None, description="after the calibration file, when one is applied")


class TrieNode(BaseModel):
    """A node of the label trie: the label tokens read so far, its children and their logits."""

    prefix: list[int]
    prefix_text: str
    children: list[int]
    children_text: list[str]
    logits: list[float] | None = Field(description="None: one child, not read")


class DroppedText(BaseModel):
    """A surface text of an option that is not read out (labels.py), and why."""

    option: str
    text: str
    reason: str


class RotationExplanation(BaseModel):
    """One option order of a debiased question (``debias.py``)."""

    order: list[str] = Field(description="the options as shown, first to last")
    suffix_tokens: int
    probabilities: dict[str, float] = Field(description="this order's answer, by option (listed order)")
    label_mass: float | None = None


class DebiasExplanation(BaseModel):
    mode: str
    rotations: list[RotationExplanation] = Field(description="the orders shown, the first (canonical) one first")
    probabilities: dict[str, float] = Field(description="the mean over the orders: what the answer uses")
    flip_rate: float = Field(description="share of the other orders whose top option differs from the first order's")


class FittedExplanation(BaseModel):
    """A fitted head's part in an answer (``fitted.py``): what the zero-shot readout said, what the
    head made of it, and how much of the head's logit came from the zero-shot log-probabilities
    versus the hidden state."""

    head: str = Field(description="the head's content id")
    rows: int | None = Field(None, description="labelled rows it was fitted on")
    zero_shot: dict[str, float] = Field(description="the zero-shot probabilities (what the answer would be without the head)")
    probabilities: dict[str, float] = Field(description="the head's probabilities: what the answer uses")
    logit_from_zero_shot: dict[str, float] = Field(description="per option, W_logp · clip(log p): the zero-shot part of its logit")
    logit_from_hidden: dict[str, float] = Field(description="per option, W_z · z + b: the hidden state's part (and the bias)")


class QuestionExplanation(BaseModel):
    type: Literal["noul", "choice", "score"]
    label_mode: str
    question_text: str = Field(description="the prompt after the shared prefix, up to the answer")
    suffix_tokens: int
    options: list[OptionExplanation] = Field(description="the order as listed; with debias, the answer "
                                                         "uses debias.probabilities instead")
    nodes: list[TrieNode]
    answer: Answer
    confidence_meaning: str | None = None
    dropped_verbalizers: list[DroppedText] = Field(default_factory=list)
    label_mass: float | None = Field(
        default=None, description="share of the full-vocabulary softmax on the root's label tokens "
                                  "(the allowed first tokens); low: the model wanted to say something else")
    debias: DebiasExplanation | None = None
    fitted: FittedExplanation | None = None


class TokenAccount(BaseModel):
    """What this call computed, and what it did not have to."""

    prefix_tokens: int = Field(description="system + state: shared by every question")
    prompt_tokens: int = Field(description="prefix + every question's suffix, each counted once")
    input_tokens: int = Field(description="usage: every question's full prompt as if sent alone")
    tokens_computed: int = Field(description="run through the model by this call, label-branch "
                                             "tokens included; a prefix found in the cache is not")
    tokens_saved: int = Field(description="input_tokens − tokens_computed (never below 0)")
    note: str = ("the shared prefix is computed once for all questions; a prefix already in the "
                 "cache (an earlier request about the same state) is not computed again; labels "
                 "of several tokens add one step per trie branch")


class Explanation(BaseModel):
    """One request, explained: ``answers`` are exactly what ``Decider.run`` returns for it."""

    model: str
    label_mode: str
    prefix_text: str
    prefix_ids: list[int]
    questions: dict[str, QuestionExplanation]
    answers: dict[str, Answer]
    usage: Usage
    tokens: TokenAccount
    latency_ms: float


# --------------------------------------------------------------------------- text for people


def _fmt(x: float | None, width: int = 7, digits: int = 3) -> str:
    return f"{'—':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def _indent(text: str, prefix: str = "  │ ") -> str:
    return "\n".join(prefix + line for line in text.splitlines() or [""])


def _answer_line(a: Answer, meaning: str | None) -> str:
    if a.type == "noul":
        line = f"P(yes) = {a.noul:.3f}"
    elif a.type == "choice":
        line = (f"{a.choice}  (p* = {a.probabilities[a.choice]:.3f}, confidence {a.confidence:.3f})")
    else:
        line = f"expected level {a.score:.3f}  (confidence {a.confidence:.3f})"
    if getattr(a, "calibration", None):
        line += f"  [calibrated: {a.calibration}]"
    out = f"  answer: {line}"
    if meaning and a.type != "noul":
        out += f"\n  confidence = {meaning}"
    return out


def render_text(e: Explanation, *, max_prompt_chars: int = 4000) -> str:
    """A compact report: the prompt with the shared-prefix boundary, then per question a table
    (option · label tokens · logit · probability · calibrated) and the answer."""
    t = e.tokens
    lines = [f"model {e.model} · labels {e.label_mode} · {t.input_tokens} input tokens, "
             f"{t.tokens_computed} computed ({t.tokens_saved} not recomputed: shared prefix / cache) "
             f"· {e.latency_ms:.0f} ms", ""]
    prefix = e.prefix_text
    if len(prefix) > max_prompt_chars:
        cut = len(prefix) - max_prompt_chars
        prefix = f"… ({cut} characters not shown) …" + prefix[cut:]
    lines += [f"shared prefix ({t.prefix_tokens} tokens; computed once, cached across requests):",
              _indent(prefix), "  ┄┄┄┄┄┄┄┄ shared-prefix boundary ┄┄┄┄┄┄┄┄", ""]
    for name, q in e.questions.items():
        lines += [f"question {name!r} ({q.type}, labels: {q.label_mode}; suffix {q.suffix_tokens} tokens):",
                  _indent(q.question_text)]
        rows = []
        for o in q.options:
            tokens = " | ".join("·".join(repr(tok.text) for tok in p.tokens) for p in o.paths)
            first = [p.tokens[0].logit for p in o.paths if p.tokens and p.tokens[0].logit is not None]
            name_col = o.option if o.meaning is None or q.type == "choice" else f"{o.option}: {o.meaning}"
            rows.append((name_col[:40], o.label[:16], tokens[:48], max(first) if first else None,
                         o.probability, o.calibrated_probability))
        w = max([len(r[0]) for r in rows] + [6])
        lw = max([len(r[1]) for r in rows] + [5])
        tw = max([len(r[2]) for r in rows] + [12])
        lines.append(f"  {'option':<{w}}  {'label':<{lw}}  {'label tokens':<{tw}}  {'logit':>7}  "
                     f"{'prob':>7}  {'calib.':>7}")
        for r in rows:
            lines.append(f"  {r[0]:<{w}}  {r[1]:<{lw}}  {r[2]:<{tw}}  {_fmt(r[3], digits=2)}  "
                         f"{_fmt(r[4])}  {_fmt(r[5])}")
        if q.dropped_verbalizers:
            lines.append("  not read: " + "; ".join(f"{d.option}: {d.text!r} ({d.reason})" for d in q.dropped_verbalizers))
        if q.label_mass is not None:
            lines.append(f"  label mass: {q.label_mass:.3f} of the full softmax on the allowed first tokens")
        if q.debias is not None:
            if q.debias.mode == "canonical":
                lines.append(f"  debias canonical: shown as {' > '.join(q.debias.rotations[0].order)[:60]}")
            else:
                lines.append(f"  debias {q.debias.mode}: {len(q.debias.rotations)} orders, flip rate {q.debias.flip_rate:.2f}")
                for rot in q.debias.rotations:
                    probs = " ".join(f"{o}={p:.3f}" for o, p in rot.probabilities.items())
                    lines.append(f"    {' > '.join(rot.order)[:60]}: {probs[:80]}")
        if q.fitted is not None:
            f = q.fitted
            lines.append(f"  fitted head {f.head} ({f.rows} rows): zero-shot → fitted")
            for o in f.probabilities:
                lines.append(f"    {o[:24]:24s} {f.zero_shot[o]:.3f} → {f.probabilities[o]:.3f}   logit = "
                             f"{f.logit_from_zero_shot[o]:+.2f} (zero-shot) {f.logit_from_hidden[o]:+.2f} (hidden)")
        lines += [_answer_line(q.answer, q.confidence_meaning), ""]
    lines.append("logit: the first label token's raw logit (the largest over an option's variants); "
                 "prob: restricted softmax over the options' label tokens (chain rule for longer labels).")
    return "\n".join(lines)


def explanation_json(e: Explanation) -> dict[str, Any]:
    """The machine form (JSON-ready)."""
    return e.model_dump(mode="json")


# ---------------------------------------------------------------- building (Decider.explain)


def explain_question(r: Readout, answer: Answer, question: Question, token: Callable[[int], str],
                      decode: Callable[[list[int]], str], confidence: ConfidenceKind,
                      debias: str = "none") -> QuestionExplanation:
    """One question's part of ``Decider.explain``: options with their label paths, the trie nodes."""
    q, trie = r.question, r.trie
    logit_at = {u: dict(zip(trie.children[u], map(float, z))) for u, z in r.node_logits.items()}
    path_p = path_probabilities(trie, r.node_logits)
    uncalibrated = r.own_probabilities()  # the order as listed; with debias the answer averages orders
    calibrated = answer_probabilities(answer, q.options) if answer.calibration else None
    meanings: dict[str, Content | None] = {}
    if question.type == "choice":
        meanings = dict(question.criteria)
    elif question.type == "score":
        meanings = {k: v for k, v in q.legend.items()}
    elif question.criteria is not None:
        meanings = {q.options[0]: question.criteria.true, q.options[1]: question.criteria.false} \
            if len(q.options) == 2 else {}
    options = []
    for oi, (name, label) in enumerate(zip(q.options, q.labels)):
        paths = [LabelPath(text=q.label_paths.texts[j],
                           tokens=[LabelToken(id=t, text=token(t), logit=logit_at.get(path[:k], {}).get(t))
                                   for k, t in enumerate(path)],
                           probability=float(path_p[j]))
                 for j, path in enumerate(trie.paths) if trie.owners[j] == oi]
        options.append(OptionExplanation(
            option=name, label=label, meaning=meanings.get(name), paths=paths,
            probability=float(uncalibrated[oi]),
            calibrated_probability=None if calibrated is None else float(calibrated[oi])))
    nodes = [TrieNode(prefix=list(u), prefix_text=decode(list(u)), children=list(kids),
                      children_text=[token(t) for t in kids],
                      logits=[float(x) for x in r.node_logits[u]] if u in r.node_logits else None)
             for u, kids in trie.internal_nodes()]
    dropped = [DroppedText(option=q.options[d.option], text=d.text, reason=d.reason) for d in q.label_paths.dropped]
    orders = None
    if r.rotations or (debias == "canonical" and q.type != "noul"):  # canonical: its one shown order
        dists = r.rotation_probabilities()
        orders = DebiasExplanation(
            mode=debias,
            rotations=[RotationExplanation(
                order=[q.options[j] for j in (rq.question.order or range(len(q.options)))],
                suffix_tokens=len(rq.question.suffix_ids),
                probabilities={o: float(x) for o, x in zip(q.options, p)}, label_mass=rq.label_mass)
                for rq, p in zip((r, *r.rotations), dists)],
            probabilities={o: float(x) for o, x in zip(q.options, r.probabilities())},
            flip_rate=debiasing.flip_rate(dists))
    return QuestionExplanation(
        type=q.type, label_mode=q.label_mode, question_text=q.question_text,
        suffix_tokens=len(q.suffix_ids), options=options, nodes=nodes, answer=answer,
        confidence_meaning=None if q.type == "noul" else CONFIDENCE_MEANING[confidence],
        dropped_verbalizers=dropped, label_mass=r.mean_label_mass(), debias=orders)


def explain_head(head: FittedHead, r: Readout) -> FittedExplanation:
    """A head's contribution to one answer: its logit split into the zero-shot and hidden parts."""
    names = list(r.question.options)
    idx = head.order(names)
    zero = r.probabilities()
    x = head_features(r.state(head.layers), np.log(np.maximum(zero[idx], 1e-300)), head.mean, head.scale)
    k = len(head.classes)
    from_zero = head.weights[:, :k] @ x[:k]
    from_hidden = head.weights[:, k:] @ x[k:] + head.bias
    p = fitted_probabilities(head, r)
    return FittedExplanation(head=head.id, rows=head.fitted.rows if head.fitted else None,
                             zero_shot={o: float(zero[i]) for i, o in enumerate(names)},
                             probabilities={o: float(p[i]) for i, o in enumerate(names)},
                             logit_from_zero_shot={c: float(v) for c, v in zip(head.classes, from_zero)},
                             logit_from_hidden={c: float(v) for c, v in zip(head.classes, from_hidden)})


def answer_probabilities(answer: Answer, options: Sequence[str]) -> np.ndarray:
    """The probabilities an answer reports, in option order (noul: [P(yes), P(no)])."""
    if answer.type == "noul":
        return np.array([answer.noul, 1.0 - answer.noul])
    return np.array([answer.probabilities[o] for o in options])


__all__ = ["CONFIDENCE_MEANING", "DebiasExplanation", "DroppedText", "Explanation", "LabelPath", "LabelToken",
           "OptionExplanation", "QuestionExplanation", "RotationExplanation", "TokenAccount", "TrieNode",
           "explanation_json", "render_text",
           "FittedExplanation", "answer_probabilities", "explain_head", "explain_question"]
