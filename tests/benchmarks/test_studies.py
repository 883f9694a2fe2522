"""The kept studies still run (benchmarks/studies/): prefill_chunks' re-stacking baseline answers as
the engine does (rows are independent: to 1e-5) on the tiny model; chunk_sizes answers W1 and W2
alike (to 1e-5) with a chunk that splits them into more runs; mid_layers_cost times the tiny
export against its twin without mid-layer outputs; w5_invariance and dataset_stats
write their schema-1 result files, on a fake Decider and fake datasets (no model, no download)."""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace

import pytest
from td_threads import THREADS
from tokenizers import Tokenizer

from benchmarks import harness
from benchmarks.harness import problems, read_results
from typed_decisions.cpu import cpu_class
from typed_decisions.evaluation import datasets as ds
from typed_decisions.spec import OptionSpec, QuestionSpec


def run_study(module, tmp_path, model, *args: str) -> dict:
    """``module.main`` on ``model`` with this worker's threads; its result file has the schema."""
    out = tmp_path / "result.json"
    assert module.main(["--model", str(model), *args, "--threads", str(THREADS), "--out", str(out)]) == 0
    assert problems(json.loads(out.read_text())) == []
    return read_results(out)


@pytest.mark.model
def test_prefill_chunks_restacking_answers_as_the_engine(tmp_path, tiny_model_dir):
    from benchmarks.studies import prefill_chunks

    res = run_study(prefill_chunks, tmp_path, tiny_model_dir, "--tokens", "450", "--chunk", "128", "--trials", "1")
    assert res["prompt_tokens"] > 3 * 128, res  # long enough to be chunked: the baseline really ran
    assert res["max_abs_dp"] <= 1e-5, res


@pytest.mark.model
def test_chunk_sizes_answers_alike_in_more_runs(tmp_path, tiny_model_dir):
    from benchmarks.studies import chunk_sizes

    res = run_study(chunk_sizes, tmp_path, tiny_model_dir, "--chunks", "2048,64", "--workloads", "W1,W2", "--rounds", "1")
    assert list(res["workloads"]) == ["W1", "W2"] and res["chunks"] == [2048, 64]
    for name, w in res["workloads"].items():
        assert w["runs"]["2048"] == 1 and w["runs"]["64"] > 1, (name, w)   # the chunk really split the runs
        assert w["max_abs_dp_vs_first"]["64"] <= 1e-5 and w["speedup_vs_first"]["2048"] == 1.0, (name, w)


@pytest.mark.model
def test_mid_layers_cost_times_the_export_against_its_twin_without_the_outputs(tmp_path, tiny_model_dir):
    from benchmarks.studies import mid_layers_cost

    res = run_study(mid_layers_cost, tmp_path, tiny_model_dir, "--tokens", "32", "--rounds", "1")
    assert res["hidden_layers"] == [15, 20]
    for shape, rows, seq in (("prefill", 1, 32), ("suffix_steps", 8, 24)):  # same numbers: checked inside
        assert res[shape]["mid_layer_bytes"] == 2 * rows * seq * 576 * 4  # 2 layers × (B, S, H) float32
        assert res[shape]["mid_layer_bytes"] < res[shape]["present_bytes"]


class W5Decider:
    """``Decider.load``'s stand-in for w5_invariance: every question's answer is a noul of 0.5,
    except that in a ``run_many`` batch ticket #3's answers move by 0.02."""

    name, model_key = "fake", "fake:int8"
    tokenizer = SimpleNamespace(encode_plain=str.split)  # one token per word (workloads.make_state)
    loads: list[dict] = []

    @classmethod
    def load(cls, path, **kw):
        cls.loads.append(kw)
        return cls()

    def run(self, request, shift=0.0):
        return {q: {"noul": 0.5 + shift} for q in request["questions"]}

    def run_many(self, requests):
        return [self.run(r, 0.02 if r["state"].startswith("Ticket #3.") else 0.0) for r in requests]


def test_w5_invariance_writes_each_tickets_difference(tmp_path, monkeypatch, capsys):
    from benchmarks.studies import w5_invariance

    monkeypatch.setattr(w5_invariance, "Decider", W5Decider)
    W5Decider.loads.clear()
    out = tmp_path / "w5.json"
    assert w5_invariance.main(["--model", "exp", "--tickets", "1,3,5", "--threads", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and doc["tool"] == "w5_invariance" and doc["model"] == "fake:int8"
    res = read_results(out)
    assert res["max_abs_dp_per_ticket"] == {"1": 0.0, "3": pytest.approx(0.02), "5": 0.0}
    assert res["max_abs_dp"] == pytest.approx(0.02) and res["threads"] == 3 and res["labels"] == "names"
    assert W5Decider.loads == [{"threads": 3, "label_mode": "names"}] * 2
    printed = json.loads(capsys.readouterr().out)  # stdout: the object it printed before it wrote files
    assert list(printed) == ["model", "cpu_class", "cpu", "labels", "max_abs_dp_per_ticket", "max_abs_dp"]
    assert printed["max_abs_dp_per_ticket"] == res["max_abs_dp_per_ticket"]


def test_dataset_stats_prints_the_table_and_writes_its_numbers(tmp_path, monkeypatch, capsys):
    from td_tokenizer import tokenizer_file

    from benchmarks.studies import dataset_stats

    rows = {"a": [{"state": f"row {i} " + "word " * (i % 5), "gold": "pq"[i % 3 == 0]} for i in range(30)],
            "b": [{"state": f"passage {i}", "question": "is it " + "so " * (i % 3), "gold": "yes"} for i in range(10)]}
    specs = {"a": QuestionSpec(name="c", type="choice", instructions="Which?", options=[OptionSpec(name=n) for n in "pq"]),
             "b": QuestionSpec(name="n", type="noul", instructions_field="question",
                               options=[OptionSpec(name="yes"), OptionSpec(name="no")])}
    monkeypatch.setattr(dataset_stats, "DATASETS", {n: SimpleNamespace(question=q) for n, q in specs.items()})
    monkeypatch.setattr(dataset_stats, "load_dataset", lambda name, split, limit=None:
                        SimpleNamespace(rows=ds.rows_for(name, rows[name], split, limit)))
    export = tmp_path / "export"
    export.mkdir()
    (export / "tokenizer.json").write_text(tokenizer_file().read_text())
    (export / "manifest.json").write_text(json.dumps({"name": "tok-model"}))
    monkeypatch.setattr(harness, "RESULTS", tmp_path / "results")

    assert dataset_stats.main(["--model", str(export), "--datasets", "a,b"]) == 0
    table = capsys.readouterr().out.strip()
    path = tmp_path / "results" / "dataset_stats" / f"tok-model-{cpu_class()}-{dt.date.today().isoformat()}.json"
    assert problems(json.loads(path.read_text())) == []
    res = read_results(path)
    assert res["table_markdown"] == table and len(table.splitlines()) == 4
    tok = Tokenizer.from_file(str(export / "tokenizer.json"))
    for name, gold in (("a", {"p": 20, "q": 10}), ("b", {"yes": 10})):  # most common first
        got = res["datasets"][name]
        n = [len(tok.encode(r["state"], add_special_tokens=False).ids) for r in rows[name]]
        assert got["rows"] == len(rows[name]) == got["calibration"] + got["test"]
        assert list(got["gold"].items()) == list(gold.items())
        assert got["state_tokens"]["mean"] == pytest.approx(sum(n) / len(n)) and got["state_tokens"]["max"] == max(n)
        assert (got["question_tokens"] is None) == (name == "a")
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.startswith(f"| `{name}` | {specs[name].type}, 2 | {len(rows[name]):,} → ")
        assert " | " + ", ".join(f"{k} {v}" for k, v in gold.items()) + " | " in row
        assert row.endswith("| – |") == (name == "a") and f" / {max(n)} | " in row
