"""The labelled rows a command's arguments name: ``--dataset NAME``, ``--data FILE.jsonl`` with
``--spec SPEC.json``, or ``--preset NAME`` (its question, and its dataset when it names one).

``question_rows(args, split, limit)`` is what ``eval``, ``calibrate`` and ``fit`` read their rows
with: (question spec, the split's rows, report metadata).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import InvalidRequestError
from ..presets import load_preset
from ..spec import QuestionSpec
from .datasets import get_spec, load_dataset, rows_for

__all__ = ["load_spec", "question_rows", "read_jsonl"]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one a line (blank lines skipped); a bad line is named."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise InvalidRequestError(f"{path} line {n} is not JSON: {e}") from None
    return rows


def load_spec(path: str | Path) -> QuestionSpec:
    """A question spec from its JSON file; a bad one is refused naming the file."""
    try:
        return QuestionSpec.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except ValueError as e:
        raise InvalidRequestError(f"question spec {path}: {e}") from None


def question_rows(args: argparse.Namespace, split: str, limit: int | None
            ) -> tuple[QuestionSpec, list[dict[str, Any]], dict[str, Any]]:
    """(question spec, rows of the split, report metadata) from --dataset / --data + --spec / --preset."""
    meta: dict[str, Any] = {"split": split, "limit": limit}
    spec: QuestionSpec | None = None
    dataset = args.dataset
    if getattr(args, "preset", None):
        preset = load_preset(args.preset)
        spec = preset.question_spec()
        meta["preset"] = {"name": preset.name, "version": preset.version}
        if not dataset and not args.data:
            dataset = preset.dataset  # the preset's own labelled data, if it names a dataset
    if dataset:
        ds = load_dataset(dataset, split, limit, progress=not args.quiet)  # type: ignore[arg-type]
        meta["dataset"] = dataset
        meta["source"] = get_spec(dataset).source
        return spec or ds.question, ds.rows, meta
    if not args.data:
        raise InvalidRequestError("give --dataset NAME, or --data FILE.jsonl with --spec SPEC.json (or --preset NAME "
                                  "of a preset that names its dataset)")
    if spec is None:
        if not args.spec:
            raise InvalidRequestError("--data needs --spec SPEC.json (the question and the row fields) or --preset NAME")
        spec = load_spec(args.spec)
    raw = read_jsonl(args.data)
    # rows_for dedupes and splits on the "state" key: give each row one, salted by the file's stem.
    keyed = [{**r, "state": spec.state(r, n), "gold": r.get(spec.gold_field)} for n, r in enumerate(raw)]
    for n, r in enumerate(raw):  # a bad label is named by its row in the file, before the hash order shuffles them
        spec.gold_index(r, n)
    if spec.instructions_field is not None:  # a row is (question, passage): dedupe and split on both
        keyed = [{**r, "question": spec.instructions_for(r, n)} for n, r in enumerate(keyed)]
    rows = rows_for(Path(args.data).stem, keyed, split, limit)  # type: ignore[arg-type]
    meta["data"] = str(args.data)
    if spec.state_field != "state" or spec.gold_field != "gold":
        spec = spec.model_copy(update={"state_field": "state", "gold_field": "gold"})
    return spec, rows, meta
