"""Verbalizers → token paths, checked at the real answer boundary.

An option is read out through one or more surface texts ("billing", "Billing"; " yes" after
"Answer:"). Each text becomes the token path the model would produce right after the prompt. The
path is only trusted when tokenization is *boundary-stable*:

    encode(tail + text) == encode(tail) + path        (tail = prompt text after its last special token)
    decode(encode(tail) + path) == decode(encode(tail)) + text

otherwise the label would merge with the prompt and its probability would be read off the wrong
tokens; we refuse with ``TokenizerBoundaryError`` naming the option instead of approximating.

Two options mapping to the same path is a duplicate label (error); a surface *variant* that
collides is simply dropped (it was our addition). A path that is a strict prefix of another
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
) -> LabelPaths:
    """Token paths for every option's surface texts (the first text of each option is required).

    ``tail`` is the prompt text after its last special token (often "\\n" or "Answer:"),
    ``end_ids`` the end-of-answer tokens appended to paths that prefix another path.
    """
    tail_ids = tok.encode_plain(tail) if tail else []
    paths: list[tuple[int, ...]] = []
    owners: list[int] = []
    texts: list[str] = []
    seen: dict[tuple[int, ...], int] = {}  # path → option
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
                continue
            key = tuple(path)
            if key in seen:
                if k == 0:
                    raise TokenizerBoundaryError(
                        f"options {option_names[seen[key]]!r} and {option_names[i]!r} have the same "
                        "label tokens; option labels must be distinct", loc)
                continue
            seen[key] = i
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
    return LabelPaths(paths=tuple(out), owners=tuple(owners), texts=tuple(texts))


__all__ = ["LabelPaths", "build_label_paths", "surface_variants"]
