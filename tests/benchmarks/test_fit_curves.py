"""benchmarks/fit_curves.py's serve-time cost (``time_requests``): zero-shot and fitted answer each
row alone, interleaved by ``harness.interleaved`` (one round per row, the order swapped every other
round), with the prefix cache off; on a fake Decider and a clock the test controls, so the medians
and the ratio are known exactly (no timing is asserted)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import pytest

from benchmarks import fit_curves, harness

HEAD = object()  # a fitted head: the fake only passes it on


class SlowingDecider:
    """Answering row n takes base * (1 + n/10) seconds of a fake clock: 1 zero-shot, 1.5 with a head."""

    name = "fake"

    def __init__(self) -> None:
        self.now, self.calls = 0.0, []

    def perf_counter(self) -> float:
        return self.now

    def run_many(self, requests, *, use_cache=True, heads=None):
        (req,) = requests
        self.calls.append((req["state"], "zero" if heads is None else "fit", use_cache))
        assert heads in (None, [{"q": HEAD}])
        self.now += (1.0 if heads is None else 1.5) * (1 + int(req["state"]) / 10)
        return [None]


def test_each_row_is_one_round_of_both_readouts_in_alternating_order(monkeypatch):
    d = SlowingDecider()
    monkeypatch.setattr(harness.time, "perf_counter", d.perf_counter)
    spec = SimpleNamespace(name="q", row_request=lambda model, row, n: {"model": model, "state": str(n)})
    got = fit_curves.time_requests(d, spec, HEAD, [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}])
    assert d.calls == [("0", "zero", False), ("0", "fit", False), ("1", "fit", False), ("1", "zero", False),
                       ("2", "zero", False), ("2", "fit", False), ("3", "fit", False), ("3", "zero", False)]
    # rows take 1.0, 1.1, 1.2, 1.3 times the base: medians 1.15 and 1.725; each round's ratio is 1.5
    # exactly, which it is only if both readouts of a round answered the same row
    assert got["zero_shot_s"] == pytest.approx(1.15) and got["fitted_s"] == pytest.approx(1.725)
    assert got["ratio_fitted_over_zero_shot"] == pytest.approx(1.5, abs=1e-12)


def test_binned_ece_is_the_metrics_ece_and_the_floor_shrinks_with_rows():
    """binned_ece on (top-1 confidence, hit) equals metrics.ece on the probabilities (its oracle);
    the floor is 0 for certain answers and falls like 1/sqrt(n) for uncertain ones."""
    from benchmarks.fit_curves import binned_ece, ece_floor, top1

    from typed_decisions.evaluation.metrics import ece

    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(4), size=300)
    probs[:5] = [1.0, 0.0, 0.0, 0.0]  # c = 1 exactly, the top bin's edge
    gold = rng.integers(0, 4, size=300)
    conf, hit = top1(probs, gold)
    assert abs(binned_ece(conf, hit) - ece(list(probs), list(gold))) < 1e-12
    assert ece_floor(np.ones(50)) == 0.0
    small, large = ece_floor(np.full(60, 0.7)), ece_floor(np.full(6000, 0.7))
    assert 0.03 < small < 0.12 and large < small / 5


def test_combine_averages_sets_from_several_runs_with_independent_errors():
    from benchmarks.plot_fit_curves import combine

    def cell(acc, lo, hi):
        return {"accuracy": [acc, lo, hi], "accuracy_minus_zero_shot": [acc - 0.5, lo - 0.5, hi - 0.5]}

    def run(sets):
        return {"results": {"sets": {name: {"zero_shot": {"accuracy": [0.5, 0.4, 0.6]},
                                            "fitted": {"rows": {"8": cell(*c)}}} for name, c in sets.items()}}}

    a = run({"x": (0.7, 0.6, 0.8), "gone": (0.1, 0.0, 0.2)})
    b = run({"y": (0.9, 0.88, 0.92), "x": (0.0, 0.0, 0.0)})  # x is read from the first file that has it
    out = combine([a, b], ["x", "y"], ["8"])
    half = 1.96 * np.sqrt((0.2 / 3.92) ** 2 + (0.04 / 3.92) ** 2) / 2  # by hand: se_i = width / (2 * 1.96)
    assert out["8"]["accuracy"] == pytest.approx([0.8, 0.8 - half, 0.8 + half], abs=1e-4)
    assert out["8"]["accuracy_minus_zero_shot"][0] == pytest.approx(0.3)
    assert out["zero_shot"] == pytest.approx([0.5, 0.5 - 0.1 / np.sqrt(2), 0.5 + 0.1 / np.sqrt(2)], abs=1e-4)
    with pytest.raises(SystemExit, match="'z' is in none"):
        combine([a, b], ["x", "z"], ["8"])


def test_a_combined_result_draws_the_sets_and_their_combined_mean(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.plot_fit_curves import combine, combined_result, plot

    def run(name, acc):
        cell = {"accuracy": [acc, acc - 0.1, acc + 0.1], "accuracy_minus_zero_shot": [acc - 0.5, acc - 0.6, acc - 0.4]}
        return {"model": "m", "machine": {"class": "avx2"},
                "results": {"sets": {name: {"type": "choice", "options": 5, "test_rows": 60,
                                            "zero_shot": {"accuracy": [0.5, 0.4, 0.6]},
                                            "fitted": {"rows": {"8": cell, "128": cell}, "split": {"8": cell}}}}}}

    runs = [run("a", 0.7), run("b", 0.9)]
    doc = combined_result(runs, ["a", "b"], ["8", "128"])
    assert list(doc["results"]["sets"]) == ["a", "b"]
    assert list(doc["results"]["mean"]) == ["zero_shot", "rows"]          # the one readout combined
    assert doc["results"]["mean"]["rows"]["128"] == combine(runs, ["a", "b"], ["8", "128"])["128"]
    assert doc["results"]["mean"]["rows"]["8"]["accuracy"][0] == pytest.approx(0.8)
    plot(doc, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_the_four_multinomial_readouts_derived_from_one_fit_equal_fitting_each():
    """prior_variants: rows / split prior, with and without the CV temperature, from one
    fit_head(prior="rows", calibrate="temperature") equal fit_head called for each (the oracle)."""
    pytest.importorskip("sklearn", reason="the [fit] extra")
    from typed_decisions.head_regression import fit_head

    rng = np.random.default_rng(3)
    n, hdim, c = 90, 12, 3
    y = np.repeat(np.arange(c), [40, 30, 20])                      # unbalanced: the rows' prior is not uniform
    h = rng.normal(size=(n, hdim)) + np.eye(c, hdim)[y] * 1.5
    p = rng.dirichlet(np.ones(c), size=n)
    counts, split = np.bincount(y, minlength=c), np.array([5.0, 3.0, 12.0])
    base = fit_head(h, p, y, components=8, method="free", prior="rows", calibrate="temperature")
    assert abs(base.temperature - 1.0) > 1e-3                       # else +T and no T could not differ
    got = fit_curves.prior_variants(base, counts, split)
    for readout, (prior, calibrate) in {"rows": ("rows", "none"), "split": (split, "none"),
                                        "rows+T": ("rows", "temperature"), "split+T": (split, "temperature")}.items():
        want = fit_head(h, p, y, components=8, method="free", prior=prior, calibrate=calibrate)
        np.testing.assert_allclose(got[readout][0], want.weights, rtol=1e-9, atol=1e-12, err_msg=readout)
        np.testing.assert_allclose(got[readout][1], want.bias, rtol=1e-9, atol=1e-12, err_msg=readout)
