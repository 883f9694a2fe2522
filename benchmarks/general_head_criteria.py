"""The criteria of ``general_head``: each dev set's gold classes as yes/no criteria, two wordings
each, and which sets are one task for leave-one-task-out (``TASK``, ``task_of``). Data only; the
reading and the evaluation are ``general_head.py``'s."""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Criterion:
    """A yes/no criterion over a dev set's rows: true of the rows whose gold class is in ``yes``."""

    name: str
    wordings: tuple[str, str]
    yes: frozenset[int]


def _c(name: str, a: str, b: str, *yes: int) -> Criterion:
    return Criterion(name, (a, b), frozenset(yes))


_NEG, _POS = "negative", "positive"
_SENTIMENT5 = [
    _c(_NEG, "Is the sentiment of this text negative?", "Does this text express a negative opinion or feeling?", 0, 1),
    _c(_POS, "Is the sentiment of this text positive?", "Does this text express a positive opinion or feeling?", 3, 4),
]
CRITERIA: dict[str, list[Criterion]] = {
    "trec": [
        _c("abbreviation", "Does this question ask what an abbreviation stands for?",
           "Is this a question about the meaning or expansion of an abbreviation?", 0),
        _c("description", "Does this question ask for a definition, description or explanation?",
           "Is this question answered by describing or explaining something?", 1),
        _c("entity", "Does this question ask for a thing, such as an animal, colour, film or product?",
           "Is the answer to this question an object or other entity (not a person, place or number)?", 2),
        _c("human", "Does this question ask for a person or a group of people?",
           "Is the answer to this question a person, a group or an organisation?", 3),
        _c("location", "Does this question ask for a place?",
           "Is the answer to this question a location, such as a city, country or mountain?", 4),
        _c("number", "Does this question ask for a number, a date or an amount?",
           "Is the answer to this question numeric, such as a count, date, distance or price?", 5),
    ],
    "sms-spam": [_c("spam", "Is this SMS message spam?",
                    "Is this text message unsolicited advertising, a prize offer or a scam?", 0)],
    "hutto-nyt": [
        _c(_NEG, *_SENTIMENT5[0].wordings, 0), _c(_POS, *_SENTIMENT5[1].wordings, 2),
        _c("neutral", "Is this text neutral, neither positive nor negative?",
           "Does this text express no clear opinion or feeling either way?", 1),
    ],
    "hutto-amazon": _SENTIMENT5, "hutto-tweets": _SENTIMENT5, "hutto-movies": _SENTIMENT5,
    "rotten-tomatoes": [_c("liked", "Did the critic like this film?", "Is this movie review favourable?", 0)],
    "debates-2016": [
        _c("democrat", "Was this said by a Democratic candidate (Hillary Clinton or Tim Kaine)?",
           "Is the speaker of this debate excerpt a Democrat?", 0, 2),
        _c("trump", "Was this said by Donald Trump?", "Is Donald Trump the speaker of this debate excerpt?", 1),
    ],
    "plot-review": [_c("same-film", "Is this review about the film whose plot is summarised above?",
                       "Do the plot summary and the review describe the same film?", 0)],
    "convention-speeches": [_c("democratic", "Was this speech given at the 2012 Democratic National Convention?",
                               "Is this a speech by a Democrat at their party's 2012 convention?", 0)],
    "sarcasm-headlines": [_c("sarcastic", "Is this headline sarcastic or satirical?",
                             "Is this a joke headline, like those of The Onion, rather than real news?", 0)],
    "unsolvable-questions": [_c("answerable", "Can this question be answered from the passage alone?",
                                "Does the passage contain the answer to this question?", 0)],
    "corr2cause": [
        _c("entailed", "Do the statistical relations in the premise imply this hypothesis?",
           "Is this hypothesis entailed by the stated relations among the variables?", 0),
        _c("contradicted", "Do the statistical relations in the premise rule out this hypothesis?",
           "Is this hypothesis contradicted by the stated relations among the variables?", 1),
    ],
    "product-matching": [_c("same-product", "Do these two product titles describe the same product?",
                            "Are Product 1 and Product 2 the same real-world item?", 0)],
    "autos-vs-electronics": [_c("cars", "Is this post about cars?",
                                "Was this post written for a newsgroup about cars and driving?", 0)],
    "commons-party": [_c("conservative", "Was this speech made by a Conservative MP?",
                         "Does the MP who made this speech belong to the Conservative Party?", 0)],
    "freshqa-false-premise": [_c("false-premise", "Does this question rest on a false premise?",
                                 "Does this question take for granted something that is not true?", 0)],
    "freshqa-fact-type": [
        _c("never-changing", "Is the true answer to this question fixed, never changing over time?",
           "Will the answer to this question stay the same no matter when it is asked?", 0),
        _c("fast-changing", "Does the true answer to this question usually change within a year?",
           "Would the answer to this question likely be different if it were asked again next year?", 2),
    ],
    "crepe-likelihood": [
        _c("more-likely", "Does this step make the event more likely?",
           "Will doing this step raise the chance that the event happens?", 2),
        _c("less-likely", "Does this step make the event less likely?",
           "Will doing this step lower the chance that the event happens?", 0),
    ],
    "news-section": [
        _c("politics", "Was this article published in the politics section of a news site?",
           "Is this a politics news article?", 0),
        _c("business", "Was this article published in the business or economy section of a news site?",
           "Is this a business news article?", 3),
    ],
    "news-sentence-bias": [
        _c("quote", "Is this sentence a quotation of what someone said?",
           "Does this sentence report someone's own words as a quote?", 2),
        _c("speculation", "Does this sentence speculate about something that is not known for certain?",
           "Is this sentence a guess rather than an established fact?", 4),
    ],
}
# pararule-deduction is left out: its truth is read off a "not" in the statement (every negated
# statement false), a shortcut a probe trained on it would carry to other criteria.
# Sets read from the same rows are one task for leave-one-task-out: held out together, so a probe
# never scores rows it was trained on under a sister criterion.
TASK = {"freshqa-false-premise": "freshqa", "freshqa-fact-type": "freshqa"}


def task_of(set_name: str) -> str:
    return TASK.get(set_name, set_name)

