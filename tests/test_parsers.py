"""The dev bench's parsers (``parsers.py``, ``parsers_suites.py``, ``parsers_corpora.py``) on small
hand-written files: what each keeps, where the state and a row's own question come from, what it
drops or refuses."""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import zipfile

import pytest

from typed_decisions.evaluation import datasets as ds
from typed_decisions.evaluation import parsers as ps
from typed_decisions.evaluation import parsers_corpora as pcs
from typed_decisions.evaluation import parsers_suites as pss


def test_parse_trec_maps_coarse_classes_and_refuses_bad_lines():
    rows = ps.parse_trec(b"ABBR:exp What is .com ?\nLOC:city Where is X ?\n\n")
    assert [r["gold"] for r in rows] == ["abbreviation", "location"]
    assert rows[0]["state"] == "What is .com ?" and rows[0]["fine"] == "exp"
    with pytest.raises(ValueError, match="line 1"):
        ps.parse_trec(b"XYZ:foo What ?\n")


def test_parse_sms_spam_quoted_commas():
    rows = ps.parse_sms_spam(b',spam,text\n0,0,"Hi, see you"\n1,1,"FREE, call now"\n')
    assert rows == [{"state": "Hi, see you", "gold": "no"}, {"state": "FREE, call now", "gold": "yes"}]


def test_parse_hutto_bins_ratings_into_five_levels():
    data = b"id\tsentiment\ttext\r\n1\t-3.1\tawful\r\n2\t-1\tmeh bad\r\n3\t0.5\tok\r\n4\t1.2\tnice\r\n5\t2.01\tsuperb\r\n"
    rows = ps.parse_hutto(data)
    assert [r["gold"] for r in rows] == ["very negative", "negative", "neutral", "positive", "very positive"]
    assert rows[0]["rating"] == -3.1
    with pytest.raises(ValueError, match="header"):
        ps.parse_hutto(b"1\t2\tx\n")


def test_parse_rotten_tomatoes_drops_plot_rows():
    csv_text = ('category,filename,text,movie_name\nplot,a.html,"A plot, long",M\n'
                'fresh,b,Great fun.,M\nrotten,c,"Dull, slow.",N\n')
    rows = ps.parse_rotten_tomatoes(bz2.compress(csv_text.encode()))
    assert [(r["state"], r["gold"]) for r in rows] == [("Great fun.", "positive"), ("Dull, slow.", "negative")]


def test_parse_trec_fine_maps_all_fifty_classes_and_refuses_an_unknown_one():
    lines = "".join(f"{label} question {i} ?\n" for i, label in enumerate(ps.TREC_FINE_CLASSES))
    rows = ps.parse_trec_fine(lines.encode())
    assert [r["gold"] for r in rows] == list(ps.TREC_FINE_CLASSES.values())
    assert len(set(ps.TREC_FINE_CLASSES.values())) == 50 and rows[0]["coarse"] == "abbreviation"
    with pytest.raises(ValueError, match="fine class 'NUM:shoe'"):
        ps.parse_trec_fine(b"NUM:shoe What size ?\n")


def test_parse_hutto_3_uses_the_middle_bin_edges():
    data = b"id\tsentiment\ttext\n1\t-0.6\ta\n2\t-0.5\tb\n3\t0.5\tc\n4\t0.6\td\n5\t-3.5\te\n"
    assert [r["gold"] for r in ps.parse_hutto_3(data)] == ["negative", "neutral", "neutral", "positive", "negative"]
    # consistent with the 5 levels: negative = the two lowest, positive = the two highest
    five = [ps.score_level(r) for r in (-3.0, -1.0, 0.0, 1.0, 3.0)]
    three = [ps.score_level_3(r) for r in (-3.0, -1.0, 0.0, 1.0, 3.0)]
    assert [(0, 0, 1, 2, 2)[f] for f in five] == three


def test_parse_convention_speeches_keeps_long_ones_and_cuts_them():
    n_min, n_max = ps.SPEECH_MIN_WORDS, ps.SPEECH_MAX_WORDS
    long_text = " ".join(f"w{i}" for i in range(n_max + 50))
    exact = " ".join(["x"] * n_min)
    data = (f'party,speaker,text\ndemocrat,A,"{long_text}"\nrepublican,B,"{exact}"\n'
            f'democrat,C,"too short"\n').encode()
    rows = ps.parse_convention_speeches(data)
    assert [(r["gold"], r["speaker"], r["words"]) for r in rows] == [("democratic", "A", n_max + 50),
                                                                     ("republican", "B", n_min)]
    assert rows[0]["state"].split()[:-1] == long_text.split()[:n_max] and rows[0]["state"].endswith(" [...]")
    assert rows[1]["state"] == exact  # not cut, not marked
    with pytest.raises(ValueError, match="row 2: party"):
        ps.parse_convention_speeches(b"party,speaker,text\ngreen,A,hello\n")


def test_parse_debates_2016_keeps_the_candidates_longer_turns():
    import gzip

    long_turn = "we will  build   the economy\n for every family in this country"  # 10 words, odd spacing
    text = ("speaker,statement,debate,party\n"
            f"HOLT,Welcome to the first debate of the season everyone here tonight,1st,Moderator\n"
            f'TRUMP,"{long_turn}",1st,Republican\n'
            "CLINTON,Wrong.,1st,Democratic\n"
            f'KAINE,"{long_turn} too",VP,Democratic\n')
    rows = ps.parse_debates_2016(gzip.compress(text.encode()))
    assert [(r["gold"], r["debate"]) for r in rows] == [("trump", "1st"), ("kaine", "VP")]
    assert rows[0]["state"] == " ".join(long_turn.split())  # whitespace normalised, words unchanged
    assert {n for n, _ in ps.DEBATE_SPEAKERS.values()} == set(ds.DATASETS["debates-2016"].question.option_names)
    with pytest.raises(ValueError, match="row 2: .*unknown speaker 'SANDERS'"):
        ps.parse_debates_2016(gzip.compress(b"speaker,statement,debate,party\nSANDERS,x,1st,Democratic\n"))


def _rt_file(films, reviews_per_film):
    lines = ["category,filename,text,movie_name"]
    for f in films:
        lines.append(f'plot,p-{f},"The plot of {f}, in which things happen.",{f}')
        lines += [f"fresh,r-{f}-{i},Review {i} of {f} says it is fine.,{f}" for i in range(reviews_per_film)]
    return bz2.compress("\n".join(lines).encode())


def test_parse_plot_review_pairs_each_review_with_its_own_or_another_films_plot():
    films = ["alpha", "beta", "gamma", "delta"]
    rows = ps.parse_plot_review(_rt_file(films, 60))
    assert len(rows) == 4 * 60
    reviews = [(f, f"Review {i} of {f} says it is fine.") for f in films for i in range(60)]  # file order
    for r, (film, review) in zip(rows, reviews, strict=True):
        assert r["film"] == film
        # the rule, recomputed here from its documented formula
        h = hashlib.sha256(f"typed-decisions/plot-review/pair\0{r['film']}\0{review}".encode()).hexdigest()
        others = [f for f in sorted(films) if f != r["film"]]
        want = r["film"] if int(h[0], 16) % 2 == 0 else others[int(h[1:9], 16) % 3]
        assert r["against"] == want and r["gold"] == ("yes" if want == r["film"] else "no")
        assert r["state"] == f"Plot summary of a film: The plot of {want}, in which things happen."
        assert f'"{review}"' in r["question"]
    yes = sum(r["gold"] == "yes" for r in rows)
    assert 90 <= yes <= 150  # about half match (240 rows; a fair coin lands here with p > 0.999)
    assert len({r["against"] for r in rows if r["gold"] == "no"}) == 4  # every film's plot is used against others
    with pytest.raises(ValueError, match="'omega' has reviews but no plot"):
        ps.parse_plot_review(bz2.compress(b"category,filename,text,movie_name\nfresh,f,Nice.,omega\n"))
    with pytest.raises(ValueError, match="row 3: a second plot for 'alpha'"):
        ps.parse_plot_review(bz2.compress(b"category,filename,text,movie_name\nplot,a,P.,alpha\nplot,b,Q.,alpha\n"))


def _bigbench(examples):
    return json.dumps({"name": "t", "examples": examples}).encode()


def test_parse_causal_judgment_splits_story_and_final_question():
    data = _bigbench([
        {"input": "Ann flipped the switch. Did Ann's choice matter? The lamp lit. Did Ann cause the light?",
         "target_scores": {"Yes": 1, "No": 0}},
        {"input": 'Bob said "go!" and ran. Did Bob run intentionally?', "target_scores": {"Yes": 0, "No": 1}}])
    rows = ps.parse_causal_judgment(data)
    assert rows[0]["state"] == "Ann flipped the switch. Did Ann's choice matter? The lamp lit."
    assert rows[0]["question"] == ps.CAUSAL_QUESTION.format(question="Did Ann cause the light?")
    assert [r["gold"] for r in rows] == ["yes", "no"] and rows[1]["state"] == 'Bob said "go!" and ran.'
    with pytest.raises(ValueError, match="no final question"):
        ps.parse_causal_judgment(_bigbench([{"input": "No question here.", "target_scores": {"Yes": 1, "No": 0}}]))
    with pytest.raises(ValueError, match="exactly one target"):
        ps.parse_causal_judgment(_bigbench([{"input": "A. B?", "target_scores": {"Yes": 1, "No": 1}}]))
    with pytest.raises(ValueError, match="must score exactly"):
        ps.parse_causal_judgment(_bigbench([{"input": "A. B?", "target_scores": {"Maybe": 1, "No": 0}}]))


def test_parse_vitaminc_passage_is_state_claim_is_the_question():
    data = _bigbench([{"input": "Film: It grossed $5 million .\nClaim: It grossed under $6 million .",
                       "target_scores": {"True": 1, "False": 0, "Neither": 0}},
                      {"input": "Film: It grossed $5 million .\nClaim: It won an award .",
                       "target_scores": {"True": 0, "False": 0, "Neither": 1}}])
    rows = ps.parse_vitaminc(data)
    assert [r["state"] for r in rows] == ["Film: It grossed $5 million ."] * 2
    assert [r["gold"] for r in rows] == ["true", "neither"]
    assert rows[1]["question"] == ps.VITAMINC_QUESTION.format(claim="It won an award .")
    # one passage, two claims: two rows, neither dropped as "the same state with two labels"
    assert len(ds.dedupe(rows)) == 2 and ds.row_key(rows[0]) != ds.row_key(rows[1])
    with pytest.raises(ValueError, match="Claim"):
        ps.parse_vitaminc(_bigbench([{"input": "no claim", "target_scores": {"True": 1, "False": 0, "Neither": 0}}]))


def _evals(*rows):
    """An OpenAI evals samples.jsonl: (user content, ideal) per line, behind a system prompt."""
    return "".join(json.dumps({"input": [{"role": "system", "content": "Answer with one word."},
                                         {"role": "user", "content": text}], "ideal": ideal}) + "\n"
                   for text, ideal in rows).encode()


def test_parse_sarcasm_headlines_maps_1_and_0():
    rows = pss.parse_sarcasm_headlines(_evals(("area man wins nothing ", "1"), ("senate passes budget", "0")))
    assert rows == [{"state": "area man wins nothing", "gold": "yes"}, {"state": "senate passes budget", "gold": "no"}]
    with pytest.raises(ValueError, match=r"sarcasm row 0: ideal must be one of \['0', '1'\], got '2'"):
        pss.parse_sarcasm_headlines(_evals(("x", "2")))
    with pytest.raises(ValueError, match="sarcasm line 1: expected"):
        pss.parse_sarcasm_headlines(b'{"input": [{"role": "assistant", "content": "x"}], "ideal": "1"}\n')


def test_parse_unsolvable_questions_passage_is_state_question_is_the_rows_own():
    rows = pss.parse_unsolvable_questions(_evals(
        ("Question: Who did the early female settlers marry?\n Context: Early male settlers married locals.\nMore.",
         "Unsolveable"),
        ("Question: Who married Rolfe?\n Context: Pocahontas married John Rolfe.", "Solveable")))
    assert [r["state"] for r in rows] == ["Early male settlers married locals.\nMore.", "Pocahontas married John Rolfe."]
    assert [r["gold"] for r in rows] == ["no", "yes"]
    assert rows[1]["question"] == pss.UNSOLVABLE_QUESTION.format(question="Who married Rolfe?")
    with pytest.raises(ValueError, match="expected 'Question: ...\\\\n Context: ...'"):
        pss.parse_unsolvable_questions(_evals(("Context: only a passage", "Solveable")))


def test_parse_pararule_rules_are_the_state_statement_the_question():
    text = "\nPassage: Fiona is nice. If someone is nice then they are big. Question: Fiona is not big. \nAnswer: "
    rows = pss.parse_pararule(_evals((text, "false"), (text.replace("not big", "big"), "true")))
    assert [r["state"] for r in rows] == ["Fiona is nice. If someone is nice then they are big."] * 2
    assert [(r["statement"], r["gold"]) for r in rows] == [("Fiona is not big.", "no"), ("Fiona is big.", "yes")]
    assert rows[0]["question"] == pss.PARARULE_QUESTION.format(statement="Fiona is not big.")
    assert len(ds.dedupe(rows)) == 2  # one passage, two statements: two rows
    with pytest.raises(ValueError, match="pararule row 0: expected 'Passage: ... Question: ... Answer:'"):
        pss.parse_pararule(_evals(("Passage: no statement here", "true")))


def test_parse_corr2cause_premise_is_state_and_exact_repeats_dedupe_to_one():
    premise = "Suppose there is a closed system of 2 variables, A and B. A correlates with B."
    rows = pss.parse_corr2cause(_evals((f"Premise: {premise} Hypothesis: A directly affects B.", "Answer: neutral"),
                                       (f"Premise: {premise} Hypothesis: A directly affects B.", "Answer: neutral"),
                                       (f"Premise: {premise} Hypothesis: B causes A via C.", "Answer: contradiction")))
    assert [r["state"] for r in rows] == [premise] * 3
    assert [(r["hypothesis"], r["gold"]) for r in rows] == [("A directly affects B.", "neutral")] * 2 + [
        ("B causes A via C.", "contradiction")]
    assert rows[2]["question"] == pss.CORR2CAUSE_QUESTION.format(hypothesis="B causes A via C.")
    assert [r["gold"] for r in ds.dedupe(rows)] == ["neutral", "contradiction"]
    assert set(pss.CORR2CAUSE_LABELS) == set(ds.DATASETS["corr2cause"].question.option_names)
    with pytest.raises(ValueError, match="ideal must be one of"):
        pss.parse_corr2cause(_evals((f"Premise: {premise} Hypothesis: A causes B.", "Answer: maybe")))


def test_parse_product_matching_keeps_the_two_titles():
    ask = "Do the following two product descriptions refer to the same real-world product? Answer 'Yes' or 'No'."
    rows = pss.parse_product_matching(_evals(
        (f"{ask}\nProduct 1: 'Title: Dymo D1 Tape 45803'\nProduct 2: 'Title: GENUINE Dymo 19mm SD45803'", "Yes"),
        (f"{ask}\nProduct 1: 'Title: Logitech H650e'\nProduct 2: 'Title: Logitech H151 3.5mm'", "No")))
    assert rows == [{"state": "Product 1: Dymo D1 Tape 45803\nProduct 2: GENUINE Dymo 19mm SD45803", "gold": "yes"},
                    {"state": "Product 1: Logitech H650e\nProduct 2: Logitech H151 3.5mm", "gold": "no"}]
    with pytest.raises(ValueError, match="product-matching row 0"):
        pss.parse_product_matching(_evals((f"{ask}\nProduct 1: 'Title: A'", "Yes")))


def test_parse_freshqa_false_premise_skips_the_warning_and_reads_quoted_newlines():
    text = ('"Warning: Please do not click thumbs up/down.",,,,,\n,,,,,\n'
            "id,split,question,false_premise,fact_type,answer_0\n"
            '0,TEST,What is the name of the first animal to land on the moon?,TRUE,slow-changing,"No animal has.\n'
            'Not one."\n'
            "1,DEV,Who wrote Hamlet?,FALSE,never-changing,Shakespeare\n")
    rows = pss.parse_freshqa_false_premise(text.encode())
    assert [(r["state"], r["gold"], r["fact_type"]) for r in rows] == [
        ("What is the name of the first animal to land on the moon?", "yes", "slow-changing"),
        ("Who wrote Hamlet?", "no", "never-changing")]  # the file's own split (TEST / DEV) is not used
    with pytest.raises(ValueError, match="no header row"):
        pss.parse_freshqa_false_premise(b"a,b,c\n1,2,3\n")
    with pytest.raises(ValueError, match="FreshQA row 0: ideal must be one of"):
        pss.parse_freshqa_false_premise(b"id,split,question,false_premise\n0,TEST,Why?,MAYBE\n")


def test_parse_crepe_steps_so_far_are_the_state_next_step_and_event_the_question():
    ask = "Answer with 'more likely', 'less likely', or 'equally likely'."
    goal = "I'm trying to change a flat tire. First, I loosen the car's lug nuts."
    rows = pss.parse_crepe(_evals(
        (f"{goal} At this point, how will 'jack up the car' change the likelihood of 'the tire touches the ground'? "
         f"{ask}", "less likely"),
        (f"{goal} At this point, how will 'jack up the car' change the likelihood of 'i can't reach the nuts'? {ask}",
         "equally likely"),
        (f"I'm trying to bake. At this point, how will 'heat the oven' change the likelihood of 'it's hot'?  {ask} ",
         "more likely")))
    assert [r["state"] for r in rows] == [goal, goal, "I'm trying to bake."]
    assert [(r["step"], r["event"], r["gold"]) for r in rows] == [
        ("jack up the car", "the tire touches the ground", "less likely"),
        ("jack up the car", "i can't reach the nuts", "equally likely"),  # an apostrophe inside the quotes
        ("heat the oven", "it's hot", "more likely")]
    assert rows[1]["question"] == ("At this point, how will 'jack up the car' change the likelihood of "
                                   "'i can't reach the nuts'?")
    assert all("Answer with" not in r["question"] and "Answer with" not in r["state"] for r in rows)
    assert len(ds.dedupe(rows)) == 3  # the same goal and steps with two questions: two rows
    assert ds.DATASETS["crepe-likelihood"].question.option_names == ["less likely", "equally likely", "more likely"]
    with pytest.raises(ValueError, match="crepe row 0: expected"):
        pss.parse_crepe(_evals((f"I'm trying to bake. How will 'heat the oven' change it? {ask}", "more likely")))
    with pytest.raises(ValueError, match="crepe row 0: ideal must be one of"):
        pss.parse_crepe(_evals((f"I'm trying to bake. At this point, how will 'a' change the likelihood of 'b'? {ask}",
                                "likely")))


def test_parse_news_sentence_bias_keeps_the_kinds_with_enough_rows():
    rows = pss.parse_news_sentence_bias(_evals(
        (" Biden made false claims. ", "[claim]"), ("It will get worse.", "[speculation]"), ("He lied.", "[claim]"),
        ("“We won,” she said.", "[quote]"), ("Maybe it rains.", "[speculation]"), ("Sales rose 5%.", "[data]")),
        min_rows=2)
    assert [(r["state"], r["gold"]) for r in rows] == [
        ("Biden made false claims.", "claim"), ("It will get worse.", "speculation"), ("He lied.", "claim"),
        ("Maybe it rains.", "speculation")]  # quote and data have 1 row each (< 2): dropped
    assert pss.BIAS_MIN_ROWS == 30 and len(pss.parse_news_sentence_bias(_evals(("He lied.", "[claim]")))) == 0
    question = ds.DATASETS["news-sentence-bias"].question
    assert set(question.option_names) < set(pss.BIAS_CLASSES) and len(question.option_names) == 6
    with pytest.raises(ValueError, match="bias_detection row 0: ideal must be one of"):
        pss.parse_news_sentence_bias(_evals(("A rumour.", "rumour")))


def test_parse_freshqa_fact_type_reads_the_same_file_as_false_premise():
    text = ('"Warning: Please do not click thumbs up/down.",,,,,\n,,,,,\n'
            "id,split,question,false_premise,fact_type,answer_0\n"
            '0,TEST,What is the name of the first animal to land on the moon?,TRUE,never-changing,"No animal has.\n'
            'Not one."\n'
            "1,DEV, Who is the CEO of Twitter? ,FALSE,slow-changing,Linda\n"
            "2,TEST,What is the price of gold today?,FALSE,fast-changing,$2\n"
            "3,TEST,,FALSE,fast-changing,\n").encode()
    rows = pss.parse_freshqa_fact_type(text)
    assert [(r["state"], r["gold"], r["false_premise"]) for r in rows] == [
        ("What is the name of the first animal to land on the moon?", "never-changing", "yes"),  # kept
        ("Who is the CEO of Twitter?", "slow-changing", "no"),
        ("What is the price of gold today?", "fast-changing", "no")]
    assert [r["state"] for r in pss.parse_freshqa_false_premise(text)] == [r["state"] for r in rows]
    assert ds.FILES["freshqa-fact-type"] == ds.FILES["freshqa-false-premise"]  # one pinned file, two questions
    assert ds.DATASETS["freshqa-fact-type"].question.option_names == list(pss.FRESHQA_FACT_TYPES)
    with pytest.raises(ValueError, match="FreshQA fact_type row 0: ideal must be one of"):
        pss.parse_freshqa_fact_type(b"id,split,question,false_premise,fact_type\n0,TEST,Why?,FALSE,static\n")


def _zip(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_parse_autos_electronics_strips_headers_and_lines_that_name_a_newsgroup():
    headers = "Xref: cmu rec.autos:101553\nPath: a!b\nFrom: x@y (X)\nNewsgroups: {g}\nSubject: {s}\nLines: 3\n\n"
    long_body = " ".join(f"w{i}" for i in range(pcs.NEWSGROUP_MAX_WORDS + 5))
    data = _zip({
        "AutoAndElectronics/rec.autos/": b"",
        "AutoAndElectronics/rec.autos/1": (headers.format(g="rec.autos,rec.autos.tech", s="Re: headlights")
                                           + "In rec.autos, Al writes:\n>Fuse?\nA LOOSE  WIRE.\n").encode("latin-1"),
        "AutoAndElectronics/sci.electronics/2": (headers.format(g="sci.electronics", s="Résumé of op-amps")
                                                 + f"Article: 4 of sci.electronics\nFrom: quoted@header\n{long_body}\n"
                                                 ).encode("latin-1"),
        "AutoAndElectronics/sci.electronics/3": (headers.format(g="sci.electronics", s="rec.autos: FAQ")
                                                 + "Archive-name: rec-autos/part1\nSee the list.\n").encode("latin-1"),
        "AutoAndElectronics/sci.electronics/4": headers.format(g="sci.electronics", s="empty").encode("latin-1"),
    })
    rows = pcs.parse_autos_electronics(data)
    assert [(r["post"], r["gold"]) for r in rows] == [("1", "cars"), ("2", "electronics"), ("3", "electronics")]
    assert rows[0]["state"] == "Subject: Re: headlights\n>Fuse? A LOOSE WIRE."
    cut = " ".join(long_body.split()[:pcs.NEWSGROUP_MAX_WORDS])
    assert rows[1]["state"] == f"Subject: Résumé of op-amps\n{cut} [...]"
    assert rows[2]["state"] == "See the list."  # a subject that names a newsgroup goes, with the archive name
    for r in rows:
        assert not any(w in r["state"] for w in ("rec.", "sci.", "Newsgroups", "Xref", "Path:", "From:"))
    with pytest.raises(ValueError, match="no known newsgroup"):
        pcs.parse_autos_electronics(_zip({"AutoAndElectronics/comp.graphics/5": b"Subject: x\n\nhello\n"}))


def test_parse_commons_party_keeps_con_and_lab_mps_and_removes_party_and_speaker_names():
    long = " ".join(["word"] * (pcs.COMMONS_MAX_WORDS + 10))
    twenty = " ".join(f"w{i}" for i in range(pcs.COMMONS_MIN_WORDS - 2))
    csv_text = ("date,agenda,speaker,party,chair,text\n"
                f'2015-10-12,Topic,Kwasi Kwarteng,Con,FALSE,"The Labour Government, as Kwasi Kwarteng said, {twenty}"\n'
                f'1999-01-21,Topic,Gordon Prentice,Lab,FALSE,"The Tories cut labour costs; Conservatives {twenty}"\n'
                f'1999-01-21,Topic,Betty Boothroyd,NA,TRUE,"Order. {long}"\n'
                f'2005-03-01,Topic,Nick Clegg,LibDem,FALSE,"{long}"\n'
                f'2005-03-01,Topic,A Short,Lab,FALSE,"What does it cost?"\n'
                f'2010-06-01,Topic,A Long,Con,FALSE,"{long}"\n')
    rows = pcs.parse_commons_party(_zip({"en.csv": csv_text}))
    assert [(r["gold"], r["speaker"]) for r in rows] == [
        ("conservative", "Kwasi Kwarteng"), ("labour", "Gordon Prentice"), ("conservative", "A Long")]
    assert rows[0]["state"] == f"House of Commons, 2015-10-12: The [...] Government, as [...] said, {twenty}"
    assert rows[1]["state"] == f"House of Commons, 1999-01-21: The [...] cut labour costs; [...] {twenty}"
    assert rows[2]["state"].endswith(" [...]") and len(rows[2]["state"].split()) == 4 + pcs.COMMONS_MAX_WORDS + 1
    assert {n for n in pcs.COMMONS_PARTIES.values()} == set(ds.DATASETS["commons-party"].question.option_names)
    with pytest.raises(ValueError, match="no en.csv"):
        pcs.parse_commons_party(_zip({"de.csv": csv_text}))
    with pytest.raises(ValueError, match="row 2: chair must be TRUE or FALSE"):
        pcs.parse_commons_party(_zip({"en.csv": "date,speaker,party,chair,text\nd,S,Con,yes,hi\n"}))


def _news(*rows):
    header = "article_id,publish_date,article_source_link,title,subtitle,text\n"
    return _zip({"NewsArticles.csv": header + "".join(f'{i},2017/3/1,{url},"{title}",,"{text}"\n'
                                                        for i, (url, title, text) in enumerate(rows))})


def test_parse_news_section_takes_the_section_from_the_url_and_keeps_it_out_of_the_state():
    long = " ".join(f"w{i}" for i in range(pcs.NEWS_MAX_WORDS + 7))
    data = _news(("http://abcnews.go.com/Politics/wireStory/vote-1", "Senate  votes", "The Senate voted."),
                 ("http://tass.com/politics/929606", "Kremlin speaks", "MOSCOW. /TASS/. The Kremlin  said no."),
                 ("http://abcnews.go.com/International/story?id=2", "Quake", long),
                 ("http://tass.com/world/929607", "Talks in Geneva", "GENEVA. /TASS/. Talks began."),
                 ("http://tass.com/economy/929603", "Oil up", "Brent gained."),
                 ("http://abcnews.go.com/Business/wireStory/fed-3", "Fed hikes", "The Fed raised rates."),
                 ("http://abcnews.go.com/Sports/wireStory/x-4", "Game", "They won."),  # 1 sport row: dropped
                 ("http://tass.com/politics/929608", "Empty", ""),  # no text: dropped
                 ("http://www.cnn.com/2017/02/07/politics/x/index.html", "CNN", "Not a site we read."))
    rows = pcs.parse_news_section(data, min_rows=2)
    assert [(r["gold"], r["site"]) for r in rows] == [("politics", "ABC News"), ("politics", "TASS"),
                                                      ("world", "ABC News"), ("world", "TASS"),
                                                      ("business", "TASS"), ("business", "ABC News")]
    assert rows[0]["state"] == "Senate votes\nThe Senate voted." and rows[1]["state"].endswith("The Kremlin said no.")
    assert rows[2]["state"] == f"Quake\n{' '.join(long.split()[:pcs.NEWS_MAX_WORDS])} [...]"
    assert not any(w in r["state"] for r in rows for w in ("http", "abcnews", "tass.com", "International", "economy"))
    assert len(pcs.parse_news_section(data, min_rows=3)) == 0 and pcs.NEWS_MIN_ROWS == 60
    assert ds.DATASETS["news-section"].question.option_names == ["politics", "world", "us", "business"]
    with pytest.raises(ValueError, match="no NewsArticles.csv"):
        pcs.parse_news_section(_zip({"News100.csv": "x\n"}))
    with pytest.raises(ValueError, match="row 2: no section"):
        pcs.parse_news_section(_news(("http://tass.com/", "Home", "Front page.")))


@pytest.mark.parametrize("parse, member", [(pcs.parse_commons_party, "en.csv"),
                                           (pcs.parse_news_section, "NewsArticles.csv")])
def test_a_zip_without_its_csv_is_refused_naming_the_member(parse, member):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("other.csv", "a,b\n1,2\n")
    with pytest.raises(ValueError, match=rf"no {member} among \['other.csv'\]"):
        parse(buf.getvalue())
