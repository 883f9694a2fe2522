"""Verbalizers → token paths, checked at the real answer boundary.

An option is read out through one or more surface texts ("billing", "Billing"; " yes" after
"Answer:"). Each text becomes the token path the model would produce right after the prompt. The
path is only trusted when tokenization is *boundary-stable*:

    encode(tail + text) == encode(tail) + path        (tail = prompt text after its last special token)
    decode(encode(tail) + path) == decode(encode(tail)) + text

otherwise the label would merge with the prompt and its probability would be read off the wrong
tokens; we refuse with ``TokenizerBoundaryError`` naming the option instead of approximating.

Two options mapping to the same path is a duplicate label (error); a surface *variant* that
collides is dropped (it was our addition), and the drop is recorded with its reason
(``LabelPaths.dropped``, shown by ``explain``). Texts are claimed in rank order (every option's
first text, then every option's second, …), so a text closer to its option's own label wins over
another option's more distant variant. With ``exclusive=True`` (the mixture label mode) two
options claiming the same tokens at the same rank — a genuine ambiguity, e.g. "apple" as a case
variant of both "Apple" and "APPLE" — lose them both, so no string counts for two options. A path that is a strict prefix of another
("bug" vs "bug report") gets the end-of-answer token appended, so the chain rule compares
P(bug, <end>) with P(bug, " report"), both well defined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import Loc, TokenizerBoundaryError
from .tokenization import TextTokenizer


@dataclass(frozen=True)
class LabelPaths:
    """Token paths of one question's options; ``owners[j]`` = option index of ``paths[j]``."""

    paths: tuple[tuple[int, ...], ...]
    owners: tuple[int, ...]
    texts: tuple[str, ...]
    dropped: tuple[DroppedVerbalizer, ...] = ()


@dataclass(frozen=True)
class DroppedVerbalizer:
    """A surface variant that is not read out, and why (explain shows these)."""

    option: int
    text: str
    reason: str


def spacing_variants(texts: Sequence[str]) -> list[str]:
    """Each text followed by itself with the leading space toggled (added, or removed), no repeats.

    Models answer right after the template's answer boundary with or without a space; the mixture
    mode reads both (the boundary check then keeps only the ones that split cleanly there). Each
    toggled text comes right after its own, so it ranks next to it (module docstring).

    >>> spacing_variants(["A", " yes"])
    ['A', ' A', ' yes', 'yes']
    """
    out: list[str] = []
    for t in texts:
        for v in (t, t[1:] if t.startswith(" ") else " " + t):
            if v and v not in out:
                out.append(v)
    return out


def surface_variants(text: str) -> list[str]:
    """The text itself, then its lower-case and capitalised forms when they differ.

    >>> surface_variants("billing")
    ['billing', 'Billing']
    >>> surface_variants("Yes")
    ['Yes', 'yes']
    """
    out = [text]
    for v in (text.lower(), text[:1].upper() + text[1:]):
        if v not in out:
            out.append(v)
    return out


def _boundary_path(tok: TextTokenizer, tail: str, tail_ids: list[int], text: str) -> list[int] | None:
    """The tokens that ``text`` adds after ``tail``, or None if they do not split cleanly there."""
    joint = tok.encode_plain(tail + text) if tail else tok.encode_plain(text)
    if joint[: len(tail_ids)] != tail_ids:
        return None
    path = joint[len(tail_ids):]
    if not path:
        return None
    if tok.decode(tail_ids + path) != tok.decode(tail_ids) + text:
        return None
    return path


def build_label_paths(
    tok: TextTokenizer,
    tail: str,
    verbalizers: Sequence[Sequence[str]],
    option_names: Sequence[str],
    end_ids: Sequence[int],
    loc: Loc = (),
    *,
    exclusive: bool = False,
) -> LabelPaths:
    """Token paths for every option's surface texts (the first text of each option is required).

    ``tail`` is the prompt text after its last special token (often "\\n" or "Answer:"),
    ``end_ids`` the end-of-answer tokens appended to paths that prefix another path.
    ``exclusive``: a variant (not a first text) whose tokens two options claim at the same rank
    is read for neither; without it the first option to claim it keeps it.
    """
    tail_ids = tok.encode_plain(tail) if tail else []
    paths: list[tuple[int, ...]] = []
    owners: list[int] = []
    texts: list[str] = []
    seen: dict[tuple[int, ...], int] = {}  # path → option
    canonical: set[tuple[int, ...]] = set()  # the first texts' paths: never taken away
    rank: dict[tuple[int, ...], int] = {}  # path → the rank k it was claimed at
    dropped: list[DroppedVerbalizer] = []
    # Canonical labels first (a collision is the caller's error), then variants (dropped on collision).
    for k in range(max(len(v) for v in verbalizers)):
        for i, variants in enumerate(verbalizers):
            if k >= len(variants):
                continue
            text = variants[k]
            path = _boundary_path(tok, tail, tail_ids, text)
            if path is None:
                if k == 0:
                    raise TokenizerBoundaryError(
                        f"option {option_names[i]!r}: its label {text!r} does not tokenize cleanly "
                        f"after the prompt (it merges with the preceding text {tail!r}); rename the "
                        "option or use labels='letters'", loc)
                dropped.append(DroppedVerbalizer(i, text, f"does not tokenize cleanly after {tail!r}"))
                continue
            key = tuple(path)
            if key in seen:
                if k == 0:
                    raise TokenizerBoundaryError(
                        f"options {option_names[seen[key]]!r} and {option_names[i]!r} have the same "
                        "label tokens; option labels must be distinct", loc)
                j = seen[key]  # -1: a variant already taken from two options
                if j == i:
                    dropped.append(DroppedVerbalizer(i, text, "same tokens as another text of this option"))
                    continue
                other = "two other options" if j < 0 else f"option {option_names[j]!r}"
                dropped.append(DroppedVerbalizer(i, text, f"same tokens as a text of {other}"))
                if exclusive and key not in canonical and j >= 0 and rank[key] == k:
                    # a variant of two options: read for neither (the first claimant loses it too)
                    at = paths.index(key)
                    dropped.append(DroppedVerbalizer(j, texts[at], f"same tokens as a text of option {option_names[i]!r}"))
                    del paths[at], owners[at], texts[at]
                    seen[key] = -1  # later claimants are dropped as well
                continue
            seen[key] = i
            rank[key] = k
            if k == 0:
                canonical.add(key)
            paths.append(key)
            owners.append(i)
            texts.append(text)

    # Disambiguate strict prefixes with the end-of-answer token.
    path_set = set(paths)
    end = tuple(end_ids)
    out = []
    for p in paths:
        is_prefix = any(len(q) > len(p) and q[: len(p)] == p for q in path_set)
        out.append(p + end if is_prefix else p)
    if len(set(out)) != len(out):
        raise TokenizerBoundaryError("two options' labels cannot be told apart even with an "
                                     "end-of-answer token; rename them", loc)
    return LabelPaths(paths=tuple(out), owners=tuple(owners), texts=tuple(texts), dropped=tuple(dropped))


__all__ = ["DroppedVerbalizer", "LabelPaths", "build_label_paths", "spacing_variants", "surface_variants"]
