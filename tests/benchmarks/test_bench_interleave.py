"""The interleaved head-to-head (``bench.py --interleave N``, ``harness.interleaved``): the schedule and the ratio.

The schedule is what makes a ratio fair on a machine whose speed drifts: every round times each
system once, the order reversed every other round, and a round's ratio divides two times taken
seconds apart. Checked here with systems that record when they run and a clock that a test
controls (no timing is asserted); the measured run is in docs/benchmarks.md.
"""

from __future__ import annotations

import pytest

from benchmarks import harness, report


class DriftingMachine:
    """A fake perf_counter whose machine slows down: the k-th call of any system takes base * (1 + k/10)."""

    def __init__(self) -> None:
        self.now, self.calls = 0.0, 0

    def perf_counter(self) -> float:
        return self.now

    def system(self, name: str, base: float, log: list[str]):
        def call() -> str:
            self.now += base * (1 + self.calls / 10)
            self.calls += 1
            log.append(name)
            return name
        return call


def test_each_round_runs_every_system_once_in_alternating_order_with_its_before_hook(monkeypatch):
    clock, log = DriftingMachine(), []
    monkeypatch.setattr(harness.time, "perf_counter", clock.perf_counter)
    fns = {"ours": clock.system("ours", 1.0, log), "peer": clock.system("peer", 2.0, log)}
    resets: list[str] = []
    times, outs = harness.interleaved(fns, rounds=4, before={"peer": lambda: resets.append("reset")}, warmup=1)
    assert log == ["ours", "peer"] + ["ours", "peer", "peer", "ours"] * 2
    assert resets == ["reset"] * 5 and outs == {"ours": "ours", "peer": "peer"}
    assert [len(t) for t in times.values()] == [4, 4]
    # The machine slowed by 80 % over the run; the per-round ratios stay near the true 2.0, while
    # a run of all of ours and then all of the peer's calls would have read (2.0 * 1.6) / 1.2.
    ratios = harness.round_ratios(times["peer"], times["ours"])
    assert all(abs(r - 2.0) < 0.25 for r in ratios), ratios


def test_round_ratios_refuses_unequal_rounds():
    with pytest.raises(ValueError, match="3 peer rounds vs 2"):
        harness.round_ratios([1.0, 2.0, 3.0], [1.0, 2.0])


def test_the_ratios_line_reports_the_median_of_the_rounds():
    res = {"model": "m", "load_avg_start": [1.0], "load_avg_end": [1.5], "results": {},
           "interleaved": {"W1": {"ratio_per_round": {"llama_cpp_prefix-reuse/ours_int8": [1.9, 1.5, 1.7, 3.0]}}}}
    out = report.ratios(res, "names")
    assert out["W1/interleaved/llama_cpp_prefix-reuse/ours_int8"] == 1.8
