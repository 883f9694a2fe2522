"""benchmarks/sweep.py: the grid of named settings, row sharing, resume, and the cross-set
analysis (mean over sets, worst set, paired deltas against the baseline), on a fake Decider whose
probabilities are a known function of the request, so every number has a numpy oracle."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest

from benchmarks import sweep
from benchmarks.harness import problems, read_results
from typed_decisions.compiler import resolve_label_mode
from typed_decisions.evaluation import datasets as ds
from typed_decisions.spec import OptionSpec, QuestionSpec


class FakeDecider:
    """p = one-hot-ish on option (len(state) + shift[mode]) % k; records every call."""

    name = "fake"
    SHIFT: ClassVar[dict[str, int]] = {"names": 0, "letters": 1}

    def __init__(self):
        self.calls: list[tuple[str, str, str | None]] = []

    def probabilities(self, request, *, label_mode="auto", **extra):
        ((qname, q),) = request["questions"].items()
        k = 2 if q["type"] == "noul" else len(q["criteria"])
        mode = "names" if q["type"] == "noul" else resolve_label_mode(q["type"], label_mode)
        self.calls.append((request["state"], mode, q.get("instructions")))
        p = np.full(k, 0.1 / max(1, k - 1))
        p[(len(request["state"]) + self.SHIFT[mode] + extra.get("bump", 0)) % k] = 0.9
        return {qname: p}

    def readouts(self, request, *, label_mass=False, **options):
        """What the sweep asks when a setting records the label mass: mass = 1 / len(state)."""
        ((qname, p),) = self.probabilities(request, **options).items()
        mass = 1.0 / len(request["state"]) if label_mass else None
        return {qname: type("R", (), {"probabilities": lambda self: p, "mean_label_mass": lambda self: mass})()}


@pytest.fixture
def two_sets(monkeypatch):
    rows_a = [{"state": "x" * (i + 1), "gold": ["p", "q", "r"][i % 3]} for i in range(24)]
    rows_b = [{"state": "passage " + "y" * i, "question": f"q{i}?", "gold": "yes" if i % 2 else "no"} for i in range(24)]
    specs = {
        "a": QuestionSpec(name="c", type="choice", instructions="Which?", options=[OptionSpec(name=n) for n in "pqr"]),
        "b": QuestionSpec(name="n", type="noul", instructions_field="question",
                          options=[OptionSpec(name="yes"), OptionSpec(name="no")]),
    }
    data = {"a": rows_a, "b": rows_b}

    class Spec:
        def __init__(self, name):
            self.question = specs[name]

    monkeypatch.setattr(sweep, "DATASETS", {n: Spec(n) for n in specs})
    monkeypatch.setattr(sweep, "load_dataset", lambda name, split, limit=None:
                        type("D", (), {"rows": ds.rows_for(name, data[name], split, limit)})())
    return data, specs


def test_collect_shares_equal_requests_resumes_and_sends_row_questions(two_sets, tmp_path):
    fake = FakeDecider()
    settings = sweep.load_settings("letters,names,auto", None)
    raw: dict = {}
    path = tmp_path / "raw.json"
    sweep.collect(raw, path, ["a", "b"], settings, 0, 5, lambda s: fake, calibrate=False)
    # choice: letters and names differ, auto == names (asked once); noul: one request for all three
    assert len(fake.calls) == 5 * 2 + 5 * 1
    assert all(instr and instr.startswith("q") for state, _, instr in fake.calls if state.startswith("passage"))
    assert raw["a/auto"]["test"] == raw["a/names"]["test"] != raw["a/letters"]["test"]
    assert read_results(path) == raw and not problems(json.loads(path.read_text()))
    n_calls = len(fake.calls)
    sweep.collect(raw, path, ["a", "b"], settings, 0, 5, lambda s: fake, calibrate=False)
    assert len(fake.calls) == n_calls  # resumed: nothing asked again
    sweep.collect(raw, path, ["a", "b"], settings, 0, 7, lambda s: fake, calibrate=False)
    assert len(fake.calls) == n_calls + 2 * 2 + 2 * 1 and len(raw["b/letters"]["test"]["gold"]) == 7


def test_a_setting_from_a_file_is_one_more_grid_entry(two_sets, tmp_path):
    f = tmp_path / "grid.json"
    f.write_text(json.dumps([{"name": "bumped", "options": {"label_mode": "names", "bump": 1}}]))
    settings = sweep.load_settings("letters", f)
    assert [s.name for s in settings] == ["letters", "bumped"]
    fake, raw = FakeDecider(), {}
    sweep.collect(raw, tmp_path / "r.json", ["a"], settings, 0, 6, lambda s: fake, calibrate=False)
    # names + bump 1 asks the same option as letters (shift 1), but through its own request
    assert raw["a/bumped"]["test"] == raw["a/letters"]["test"] and len(fake.calls) == 12
    with pytest.raises(SystemExit, match="unknown setting"):
        sweep.load_settings("nope", None)
    f.write_text(json.dumps([{"name": "x", "colour": 1}]))
    with pytest.raises(SystemExit, match="entry 0"):
        sweep.load_settings("", f)
    # the same name with other options refuses to mix with the stored rows
    with pytest.raises(SystemExit, match="other options"):
        sweep.collect(raw, tmp_path / "r.json", ["a"], [sweep.Setting("bumped", {"bump": 2})], 0, 6,
                      lambda s: fake, calibrate=False)


def test_analysis_mean_worst_and_paired_deltas_match_numpy(two_sets, tmp_path):
    fake, raw = FakeDecider(), {}
    settings = sweep.load_settings("letters,names", None)
    sweep.collect(raw, tmp_path / "r.json", ["a", "b"], settings, 0, 8, lambda s: fake, calibrate=False)
    res = sweep.analyse(raw, ["a", "b"], settings, 0, 8, 200, "letters")

    def acc(key):
        c = raw[key]["test"]
        return float(np.mean([int(np.argmax(p)) == g for p, g in zip(c["probabilities"], c["gold"], strict=True)]))

    for s in ("letters", "names"):
        per_set = {d: acc(f"{d}/{s}") for d in "ab"}
        got = res["settings"][s]
        assert got["mean_accuracy"] == pytest.approx(np.mean(list(per_set.values())), abs=1e-4)
        assert got["worst_accuracy"] == min(per_set.values()) and per_set[got["worst_set"]] == min(per_set.values())
        lo, hi = got["mean_accuracy_ci95"]
        assert lo <= got["mean_accuracy"] <= hi
    deltas = res["settings"]["names"]["delta_vs_baseline"]
    for d in "ab":
        assert deltas[d]["delta"] == pytest.approx(acc(f"{d}/names") - acc(f"{d}/letters"), abs=1e-4)
    assert deltas["b"]["delta"] == 0 and deltas["b"]["ci95"] == [0, 0]  # noul: same rows, same resamples
    assert "delta_vs_baseline" not in res["settings"]["letters"]
    table = sweep.report(res, ["a", "b"], settings, "letters")
    assert "**mean over sets**" in table and "names − letters" in table


def test_analyse_only_reads_the_raw_file_and_asks_nothing(two_sets, tmp_path):
    fake, raw = FakeDecider(), {}
    out = tmp_path / "s.json"
    settings = sweep.load_settings("letters,names", None)
    sweep.collect(raw, out.with_suffix(".raw.json"), ["a", "b"], settings, 0, 6, lambda s: fake, calibrate=False)
    assert sweep.main(["--datasets", "a,b", "--settings", "letters,names", "--test", "40", "--boot", "20",
                       "--out", str(out), "--analyse-only"]) == 0
    summary = read_results(out)
    assert summary["cells"]["a/names"]["test_n"] == 6  # what the raw file has, not --test
    with pytest.raises(SystemExit, match="no rows for a/auto"):
        sweep.main(["--datasets", "a", "--settings", "auto", "--out", str(out), "--analyse-only"])


def test_raw_names_the_raw_file_apart_from_the_summary(two_sets, tmp_path):
    fake, raw = FakeDecider(), {}
    raw_path = tmp_path / "main.raw.json"
    sweep.collect(raw, raw_path, ["a"], sweep.load_settings("letters", None), 0, 5, lambda s: fake, calibrate=False)
    out = tmp_path / "lever.json"
    assert sweep.main(["--datasets", "a", "--settings", "letters", "--boot", "20", "--out", str(out),
                       "--raw", str(raw_path), "--analyse-only"]) == 0
    assert read_results(out)["cells"]["a/letters"]["test_n"] == 5
    assert not out.with_suffix(".raw.json").exists()  # nothing written beside the summary
    with pytest.raises(SystemExit, match="no rows for a/letters"):  # without --raw: <out>.raw.json, which does not exist
        sweep.main(["--datasets", "a", "--settings", "letters", "--out", str(out), "--analyse-only"])


def test_label_mass_is_recorded_and_judged_as_an_abstain_signal(two_sets, tmp_path):
    f = tmp_path / "grid.json"
    f.write_text(json.dumps([{"name": "auto-mass", "options": {"label_mode": "auto", "label_mass": True}}]))
    settings = sweep.load_settings("auto", f)
    fake, raw = FakeDecider(), {}
    sweep.collect(raw, tmp_path / "r.json", ["a", "b"], settings, 0, 12, lambda s: fake, calibrate=False)
    cell = raw["a/auto-mass"]["test"]
    assert cell["probabilities"] == raw["a/auto"]["test"]["probabilities"]  # same answers, plus the mass
    assert "label_mass" not in raw["a/auto"]["test"]
    states = [r["state"] for r in sweep.load_dataset("a", "test", 12).rows]
    assert cell["label_mass"] == pytest.approx([1 / len(x) for x in states])
    res = sweep.analyse(raw, ["a", "b"], settings, 0, 12, 100, "auto")
    got = res["cells"]["a/auto-mass"]["label_mass"]

    # oracle: rank rows by each signal, answer the top ceil(c*n), average accuracy over the coverages
    probs = [np.asarray(p) for p in cell["probabilities"]]
    hits = np.array([int(np.argmax(p)) == g for p, g in zip(probs, cell["gold"], strict=True)], float)
    conf = np.array([p.max() for p in probs])
    mass = np.array(cell["label_mass"])

    def sel(score):
        order = np.argsort(-score, kind="stable")
        return np.mean([hits[order[:int(np.ceil(c * len(hits)))]].mean() for c in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)])

    assert got["selective_accuracy"]["confidence"] == pytest.approx(sel(conf), abs=1e-4)
    assert got["selective_accuracy"]["label_mass"] == pytest.approx(sel(mass), abs=1e-4)
    assert got["selective_accuracy"]["product"] == pytest.approx(sel(conf * mass), abs=1e-4)
    summ = res["settings"]["auto-mass"]["label_mass"]
    assert summ["sets"] == 2 and "label_mass" not in res["settings"]["auto"]
    assert summ["mean_minus_confidence"]["label_mass"] == pytest.approx(np.mean(
        [res["cells"][f"{d}/auto-mass"]["label_mass"]["selective_accuracy"]["label_mass"]
         - res["cells"][f"{d}/auto-mass"]["label_mass"]["selective_accuracy"]["confidence"] for d in "ab"]), abs=1e-3)
    assert "Abstain signals" in sweep.report(res, ["a", "b"], settings, "auto")


# --- few-shot settings (issue #14, lever 6) ---------------------------------------------------------


class ShotsDecider(FakeDecider):
    """FakeDecider that also records each request's examples and shifts by their count."""

    def __init__(self):
        super().__init__()
        self.examples: list[list[dict] | None] = []

    def probabilities(self, request, *, label_mode="auto", **extra):
        self.examples.append(request.get("examples"))
        return super().probabilities(request, label_mode=label_mode, bump=len(request.get("examples") or []))


def test_a_shots_setting_shows_calibration_rows_one_per_class_first(two_sets, tmp_path):
    data, _ = two_sets
    f = tmp_path / "grid.json"
    f.write_text(json.dumps([{"name": "names-3shot", "options": {"label_mode": "names"}, "shots": 3}]))
    settings = sweep.load_settings("names,auto-2shot", f)
    assert [s.shots for s in settings] == [0, 2, 3]
    fake, raw = ShotsDecider(), {}
    sweep.collect(raw, tmp_path / "r.json", ["a"], settings, 0, 4, lambda s: fake, calibrate=False)
    calib = ds.rows_for("a", data["a"], "calibration")
    # names (no examples), auto-2shot, names-3shot: three distinct requests per row
    assert len(fake.calls) == 3 * 4 and fake.examples[0] is None
    three = fake.examples[2]
    assert {e["answers"]["c"] for e in three} == {"p", "q", "r"}  # one per class, all classes
    assert [e["state"] for e in three] == [r["state"] for r in calib if r["state"] in {e["state"] for e in three}]
    two = fake.examples[1]
    first = calib[0]["gold"]
    assert two[0]["answers"]["c"] in {first, next(r["gold"] for r in calib if r["gold"] != first)}
    assert len({e["answers"]["c"] for e in two}) == 2  # two classes before any repeat
    assert all(fake.examples[i] == fake.examples[i % 3] for i in range(12))  # the same examples every row
    test_states = {r["state"] for r in ds.rows_for("a", data["a"], "test", 4)}
    assert not test_states & {e["state"] for e in three}
    assert raw["a/auto-2shot"]["test"] != raw["a/names"]["test"]  # shots change the answers (shift by k)
    assert json.loads(raw["a/auto-2shot"]["fingerprint"])["shots"] == 2
    assert "shots" not in json.loads(raw["a/names"]["fingerprint"])  # old raw files keep resuming


def test_shots_rows_give_their_own_question_to_examples(two_sets, tmp_path):
    data, _ = two_sets
    fake, raw = ShotsDecider(), {}
    sweep.collect(raw, tmp_path / "r.json", ["b"], sweep.load_settings("auto-2shot", None), 0, 2,
                  lambda s: fake, calibrate=False)
    calib = {r["state"]: r for r in ds.rows_for("b", data["b"], "calibration")}
    for ex in fake.examples[0]:
        assert ex["instructions"] == {"n": calib[ex["state"]]["question"]}
        assert ex["answers"] == {"n": calib[ex["state"]]["gold"]}


def test_shots_must_be_a_count(two_sets, tmp_path):
    f = tmp_path / "grid.json"
    for bad in (-1, "4", 2.5, True):
        f.write_text(json.dumps([{"name": "x", "shots": bad}]))
        with pytest.raises(SystemExit, match="shots must be an integer"):
            sweep.load_settings("", f)


def test_analyse_only_with_a_shots_setting_from_a_small_raw_file(two_sets, tmp_path):
    """A hand-written raw file: the few-shot cell is analysed and compared like any other."""
    out = tmp_path / "s.json"
    gold = [0, 1, 2, 0, 1, 2]
    right = [[0.8 if i == g else 0.1 for i in range(3)] for g in gold]
    wrong = [[0.8 if i == (g + 1) % 3 else 0.1 for i in range(3)] for g in gold]

    def cell(setting, probs):
        s = sweep.BUILTIN_SETTINGS[setting]
        return {"dataset": "a", "type": "choice", "setting": setting, "fingerprint": s.fingerprint(),
                "options": ["p", "q", "r"], "fit": {"gold": [], "probabilities": []},
                "test": {"gold": gold, "probabilities": probs}, "seconds": 1.0, "model": "fake"}
    raw = {"a/auto": cell("auto", wrong[:3] + right[3:]), "a/auto-4shot": cell("auto-4shot", right)}
    out.with_suffix(".raw.json").write_text(json.dumps(raw))
    assert sweep.main(["--datasets", "a", "--settings", "auto,auto-4shot", "--baseline", "auto", "--boot", "50",
                       "--out", str(out), "--analyse-only"]) == 0
    summary = read_results(out)
    assert summary["cells"]["a/auto-4shot"]["test"]["accuracy"] == 1.0
    assert summary["cells"]["a/auto"]["test"]["accuracy"] == 0.5
    assert summary["settings"]["auto-4shot"]["delta_vs_baseline"]["a"]["delta"] == 0.5
    assert {s["name"]: s["shots"] for s in summary["grid"]} == {"auto": 0, "auto-4shot": 4}
