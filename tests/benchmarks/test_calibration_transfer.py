"""benchmarks/studies/calibration_transfer.py: leave-one-set-out calibration transfer on synthetic sweep raw
files where the truth is known (sets drawn from softmax(u), reported as softmax(T*·u)), so the fitted
temperatures, the sign of every delta and the verdict have an answer; plus numpy oracles for the
vectorised bootstrap metrics and the pairing of before and after."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.harness import read_results
from benchmarks.studies import calibration_transfer as ct
from typed_decisions.evaluation.calibration_fitting import fit_temperature
from typed_decisions.evaluation.metrics import accuracy, ece, nll


def synthetic_cell(rng, name, qtype, k, n, overconfidence, setting="auto", spread=1.5):
    """A sweep raw cell: true probabilities softmax(u), gold drawn from them, the model reports
    softmax(overconfidence · u), so temperature ``overconfidence`` calibrates it exactly."""
    u = rng.normal(0.0, spread, size=(n, k))
    true = np.exp(u - u.max(axis=1, keepdims=True))
    true /= true.sum(axis=1, keepdims=True)
    gold = [int(rng.choice(k, p=q)) for q in true]
    z = overconfidence * u
    rep = np.exp(z - z.max(axis=1, keepdims=True))
    rep /= rep.sum(axis=1, keepdims=True)
    return f"{name}/{setting}", {"dataset": name, "type": qtype, "setting": setting, "options": [f"o{i}" for i in range(k)],
                                 "fit": {"gold": [], "probabilities": []},
                                 "test": {"gold": gold, "probabilities": rep.tolist()}}


def raw_file(specs, seed=0):
    rng = np.random.default_rng(seed)
    return dict(synthetic_cell(rng, *s) for s in specs)


SHARED = [("c3", "choice", 3, 300, 2.5), ("c4", "choice", 4, 300, 2.5), ("c6", "choice", 6, 300, 2.5),
          *[(n, "noul", 2, 300, 0.4, "auto", 3.0) for n in ("n1", "n2", "n3")]]  # noul: under-confident


def test_a_temperature_shared_by_type_is_recovered_and_transfers():
    sets = ct.load_sets(raw_file(SHARED), "auto")
    res = ct.analyse(sets, n_boot=200)
    for name, e in res["sets"].items():
        truth = 2.5 if e["type"] == "choice" else 0.4
        f = e["families"]["type-T"]
        assert f["params"]["temperature"] == pytest.approx(truth, rel=0.25), name
        assert f["delta"]["nll"] < 0 and f["delta"]["ece"] < 0 and f["delta"]["accuracy"] == 0, name
        assert f["delta_ci95"]["nll"][1] < 0, name  # lower beyond noise: 300 rows, strong miscalibration
    assert res["families"]["type-T"]["meets_bar"] and res["families"]["type-T"]["both_improved"] == 6
    assert "type-T" in res["families_meeting_bar"] and res["verdict"].startswith("transfers")
    # choice wants T > 1, noul T < 1: one temperature for all types cannot serve both
    assert not res["families"]["pooled-T"]["meets_bar"]
    assert res["fit_on_all_sets"]["choice"] == pytest.approx(2.5, rel=0.2)
    assert res["fit_on_all_sets"]["noul"] == pytest.approx(0.4, rel=0.2)


def test_opposite_miscalibration_does_not_transfer_but_the_within_set_fit_helps():
    specs = [("over", "choice", 3, 300, 2.5), ("under", "choice", 3, 300, 0.4)]
    res = ct.analyse(ct.load_sets(raw_file(specs), "auto"), n_boot=200)
    for name in ("over", "under"):
        loso, within = res["sets"][name]["families"]["type-T"], res["sets"][name]["families"]["within-T"]
        assert loso["delta"]["nll"] > 0 and loso["delta"]["ece"] > 0, name
        assert loso["delta_ci95"]["nll"][0] > 0, name  # worse beyond noise
        assert within["delta"]["nll"] < 0 and within["delta"]["ece"] < 0, name
    assert res["sets"]["over"]["families"]["type-T"]["params"]["temperature"] == pytest.approx(0.4, rel=0.25)
    assert res["families_meeting_bar"] == [] and res["verdict"].startswith("does not transfer")
    assert res["families"]["type-T"]["nll_worse_beyond_ci"] == ["over", "under"]
    assert res["meets_bar_by_type"] == {"choice": {"type-T": False, "pooled-T": False}}
    table = ct.report(res)
    assert "**Verdict:** does not transfer" in table and "| over (choice, 3, 300) |" in table


def test_a_set_is_never_in_its_own_fit():
    raw = raw_file(SHARED[:2] + SHARED[3:5] + [("c5", "choice", 5, 120, 0.3)])
    sets = ct.load_sets(raw, "auto")
    res = ct.analyse(sets, n_boot=20)
    for s in sets:
        fams = res["sets"][s.name]["families"]
        for fam in ("type-T", "pooled-T", "type-Platt"):
            if fam not in fams:
                assert fam == "type-Platt" and s.qtype != "noul"
                continue
            assert s.name not in fams[fam]["fitted_on"]
        others = [o for o in sets if o.name != s.name and o.qtype == s.qtype]
        assert fams["type-T"]["fitted_on"] == [o.name for o in others]
        assert fams["type-T"]["params"]["temperature"] == pytest.approx(
            fit_temperature([p for o in others for p in o.probs], [int(g) for o in others for g in o.gold]))
        assert fams["pooled-T"]["fitted_on"] == [o.name for o in sets if o.name != s.name]
    # changing a set's own rows changes nothing fitted for it
    raw2 = dict(raw)
    raw2["c5/auto"] = dict(raw["c5/auto"], test={"gold": [0] * 120, "probabilities": [[0.96, 0.01, 0.01, 0.01, 0.01]] * 120})
    res2 = ct.analyse(ct.load_sets(raw2, "auto"), n_boot=20)
    for fam in ("type-T", "pooled-T"):
        assert res2["sets"]["c5"]["families"][fam]["params"] == res["sets"]["c5"]["families"][fam]["params"]
    assert res2["sets"]["c3"]["families"]["type-T"]["params"] != res["sets"]["c3"]["families"]["type-T"]["params"]


def test_within_set_fits_one_half_and_reports_on_the_other():
    raw = raw_file([("c", "choice", 4, 40, 2.0)], seed=3)
    (s,) = ct.load_sets(raw, "auto")
    after, fitted = ct.calibrated(ct.FAMILIES[3], [s], s)
    t_even, t_odd = (fit_temperature(list(s.probs[h::2]), s.gold[h::2].tolist()) for h in (0, 1))
    assert [p["temperature"] for p in fitted["params"]] == pytest.approx([t_even, t_odd])
    np.testing.assert_allclose(after[1::2], ct.apply_t({"temperature": t_even}, s.probs[1::2]))
    np.testing.assert_allclose(after[0::2], ct.apply_t({"temperature": t_odd}, s.probs[0::2]))
    # the cross-fitted NLL is the mean of the two halves' NLLs
    halves = [nll(list(after[h::2]), s.gold[h::2].tolist()) for h in (0, 1)]
    assert nll(list(after), s.gold.tolist()) == pytest.approx(np.mean(halves))
    assert ct.calibrated(ct.FAMILIES[0], [s], s) is None  # no other set of its type: nothing to transfer


def test_resampled_metrics_match_the_library_and_the_deltas_are_paired():
    raw = raw_file([("a", "choice", 3, 60, 2.0), ("b", "choice", 5, 50, 0.6)], seed=1)
    sets = ct.load_sets(raw, "auto")
    for s in sets:  # resample = the rows themselves: the library's numbers
        got = ct.resampled_metrics(s.probs, s.gold, np.arange(len(s.gold))[None, :])
        rows, g = list(s.probs), s.gold.tolist()
        assert got["nll"][0] == pytest.approx(nll(rows, g)) and got["accuracy"][0] == pytest.approx(accuracy(rows, g))
        assert got["ece"][0] == pytest.approx(ece(rows, g, 10))
    # an identity "calibration" has after == before on every resample: the interval is exactly 0
    ident = ct.Family("id", "all", lambda p, g: {}, lambda prm, p: p)
    res = ct.analyse(sets, families=[ident, ct.FAMILIES[0]], n_boot=50, seed=7)
    assert all(res["sets"][s.name]["families"]["id"]["delta_ci95"] == {m: [0.0, 0.0] for m in ct.METRIC_NAMES}
               for s in sets)
    # oracle: the same resamples (seed 7, sets in order) through the library's metrics, after − before
    rng = np.random.default_rng(7)
    for s in sets:
        idx = rng.integers(0, len(s.gold), size=(50, len(s.gold)))
        other = next(o for o in sets if o is not s)
        t = fit_temperature(list(other.probs), other.gold.tolist())
        after = ct.apply_t({"temperature": t}, s.probs)
        for m, f in (("nll", nll), ("ece", ece)):
            diffs = [f(list(after[i]), s.gold[i].tolist()) - f(list(s.probs[i]), s.gold[i].tolist()) for i in idx]
            want = [round(float(np.percentile(diffs, q)), 4) for q in (2.5, 97.5)]
            assert res["sets"][s.name]["families"]["type-T"]["delta_ci95"][m] == pytest.approx(want, abs=1e-4)


def test_platt_recovers_a_known_logit_shift_and_is_the_librarys_combined_calibration():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 3, 4000)  # the model's logit of "yes"
    p_yes = 1 / (1 + np.exp(-z))
    gold = (rng.random(4000) >= 1 / (1 + np.exp(-(0.5 * z + 1.0)))).astype(int)  # truth: sigmoid(z/2 + 1)
    probs = np.stack([p_yes, 1 - p_yes], axis=1)
    prm = ct.fit_platt(list(probs), gold.tolist())
    assert 1 / prm["temperature"] == pytest.approx(0.5, abs=0.05) and prm["bias"] == pytest.approx(1.0, abs=0.15)
    want = 1 / (1 + np.exp(-(z / prm["temperature"] + prm["bias"])))
    np.testing.assert_allclose(ct.apply_platt(prm, probs)[:, 0], want, atol=1e-9)
    # separable rows keep a finite fit inside fit_temperature's bounds
    sep = ct.fit_platt([[0.9, 0.1], [0.1, 0.9]] * 10, [0, 1] * 10)
    assert 0.05 <= sep["temperature"] <= 20 and np.isfinite(sep["bias"])


def test_main_prints_the_table_and_a_json_line_and_writes_the_result(tmp_path, capsys):
    raw = raw_file(SHARED[:2] + SHARED[3:5])
    raw.update(raw_file([("c3", "choice", 3, 30, 1.0, "letters")]))
    path = tmp_path / "sweep.raw.json"
    path.write_text(json.dumps(raw))
    out = tmp_path / "transfer.json"
    assert ct.main([str(path), "--boot", "50", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["verdict"].startswith("transfers") and summary["families"]["type-T"]["sets"] == 4
    full = read_results(out)
    assert json.loads(out.read_text())["tool"] == "calibration_transfer"
    assert full["setting"] == "auto" and set(full["sets"]) == {"c3", "c4", "n1", "n2"}
    assert full["sets"]["c3"]["n"] == 300 and full["table_markdown"] in "\n".join(lines)
    with pytest.raises(SystemExit, match="no cells for setting 'names'"):
        ct.main([str(path), "--setting", "names"])
