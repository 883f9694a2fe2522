"""One question's part of a prompt: its text, and per option its label and verbalizers, in the
order the options are shown.

``question_block`` renders a noul, choice or score question in a label mode (names, letters,
mixture) and a shown order (debias.py: as listed, canonical, or a rotation): the letters follow the
shown position, the options stay in the listed order. ``canonical_base`` is the first shown order
when it is canonical, ``directed_header`` whether a scale's header names its direction, and
``check_mixture`` refuses an option spoken like another option's letter. The compiler
(compiler.py) puts the block after the state and tokenizes the whole prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .debias import Debias, canonical_direction, canonical_order
from .errors import InvalidRequestError
from .labels import surface_variants
from .letters import letter_labels
from .schema import Choice, Noul, Score, render_content
from .wording import DEFAULT_WORDING, WORDINGS, Wording

QuestionLabels = Literal["names", "letters", "mixture"]  # what one question is actually compiled with
QUESTION_HEAD = "Question:"  # every question part starts with it (see Compiler.compile)


def question_block(q: Noul | Choice | Score, mode: QuestionLabels, order: Sequence[int] | None = None,
                    wording: Wording = WORDINGS[DEFAULT_WORDING],
                    directed: bool = True) -> tuple[str, list[str], list[str], list[list[str]]]:
    """(question text, option names, labels, verbalizers per option), options in the listed order.

    ``order`` (debias): shown position i lists option ``order[i]``; the labels of the letter modes
    follow the shown position, so option j's label is the one of the position it is shown at.
    ``directed``: a score's header says which end comes first (False: "Levels:", for a scale
    shown in its canonical direction, canonical_direction).
    """
    lines: list[str] = []
    if isinstance(q, Noul):
        lines.append(f"{QUESTION_HEAD} {render_content(q.instructions)}" if q.instructions is not None
                     else f"{QUESTION_HEAD} {wording.noul_question}")
        if q.criteria is not None and q.criteria.true is not None:
            lines.append(f"yes means: {render_content(q.criteria.true)}")
        if q.criteria is not None and q.criteria.false is not None:
            lines.append(f"no means: {render_content(q.criteria.false)}")
        lines.append(wording.noul_answer)
        return "\n".join(lines), ["yes", "no"], ["yes", "no"], [surface_variants("yes"), surface_variants("no")]

    if isinstance(q, Choice):
        names = list(q.criteria)
        descriptions = [q.criteria[n] for n in names]
        default_q = wording.choice_question
    else:
        names = [str(i) for i in range(len(q.criteria))]
        descriptions = list(q.criteria)
        default_q = wording.score_question
    n = len(names)
    shown = list(range(n)) if order is None else list(order)
    if sorted(shown) != list(range(n)):
        raise ValueError(f"order must be a permutation of 0..{n - 1}, got {shown}")
    lines.append(f"{QUESTION_HEAD} {render_content(q.instructions) if q.instructions is not None else default_q}")
    if isinstance(q, Choice):
        header = "Options:"
    else:
        header = ("Levels:" if not directed else
                  "Levels (lowest first):" if shown == sorted(shown) else
                  "Levels (highest first):" if shown == sorted(shown, reverse=True) else "Levels:")

    if mode in ("letters", "mixture"):
        position_labels = letter_labels(n)
        labels = [""] * n
        for pos, j in enumerate(shown):
            labels[j] = position_labels[pos]
        lines.append(header)
        for pos, j in enumerate(shown):
            name, desc = names[j], descriptions[j]
            text = name if isinstance(q, Choice) else render_content(desc)
            extra = f": {render_content(desc)}" if isinstance(q, Choice) and desc is not None else ""
            lines.append(f"{position_labels[pos]}. {text}{extra}")
        if mode == "letters":
            lines.append(wording.labels_answer if len(labels[0]) > 1 else wording.letters_answer)
            return "\n".join(lines), names, labels, [[label] for label in labels]
        # mixture: the letter first (the required label), then the name and its case variants
        # (score: the level text, when it is text); the compiler adds the leading-space variants
        kind = "label" if len(labels[0]) > 1 else "letter"
        lines.append(wording.mixture_answer.format(kind=kind, what="option name" if isinstance(q, Choice) else "level"))
        spoken = names if isinstance(q, Choice) else [d if isinstance(d, str) else None for d in descriptions]
        verbalizers = [[label] + (surface_variants(t.strip()) if t and t.strip() else [])
                       for label, t in zip(labels, spoken)]
        return "\n".join(lines), names, labels, verbalizers

    lines.append(header)
    if isinstance(q, Choice):
        for j in shown:
            name, desc = names[j], descriptions[j]
            lines.append(f"- {name}: {render_content(desc)}" if desc is not None else f"- {name}")
        lines.append(wording.names_answer)
        return "\n".join(lines), names, names, [surface_variants(n) for n in names]
    for j in shown:
        lines.append(f"{names[j]}: {render_content(descriptions[j])}")
    lines.append(wording.score_names_answer)
    return "\n".join(lines), names, names, [[n] for n in names]


def canonical_base(q: Noul | Choice | Score, debias: Debias, mode: QuestionLabels) -> list[int] | None:
    """The first shown order, when it is canonical (debias.py): a choice's under ``canonical`` and
    ``rotate`` (``canonical_order``: by its options' descriptions, names where they have none); a
    score's under ``canonical`` in the letter modes (``canonical_direction``). None: as listed."""
    if isinstance(q, Choice) and debias != "none":
        return canonical_order(list(q.criteria), [None if d is None else render_content(d) for d in q.criteria.values()])
    if isinstance(q, Score) and debias == "canonical" and mode in ("letters", "mixture"):
        return canonical_direction([render_content(d) for d in q.criteria])
    return None


def directed_header(q: Noul | Choice | Score, base: Sequence[int] | None) -> bool:
    """Whether a score's header names its direction: not when it is shown in its canonical direction
    (a score has a ``canonical_base`` only then)."""
    return not (isinstance(q, Score) and base is not None)


def check_mixture(name: str, options: Sequence[str], labels: Sequence[str], verbalizers: Sequence[Sequence[str]]) -> None:
    """Refuse an option whose spoken name is another option's letter ("B" named at letter A):
    the model's "B" could mean either, and the mixture would count it for one at random."""
    owner = {label: i for i, label in enumerate(labels)}
    for i, texts in enumerate(verbalizers):
        for t in texts[1:2]:  # the name itself; a colliding case variant is only dropped (labels.py)
            j = owner.get(t)
            if j is not None and j != i:
                raise InvalidRequestError(
                    f"option {options[i]!r} is spoken as {t!r}, the letter of option {options[j]!r}: the "
                    "mixture label mode cannot tell them apart; rename the option or use labels='letters' "
                    "or 'names'", ("questions", name, "criteria"))
