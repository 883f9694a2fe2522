"""benchmarks/general_head.py's leave-one-task-out evaluation on synthetic reads: a probe
learns a direction of the states that carries every criterion's truth, and it is fitted on the
other tasks only (a task whose states alone carry its truth gains nothing; sets of one task are
held out together)."""

import numpy as np

from benchmarks import general_head as gh


def _reads(rng, sets, carried, dims=24, n=40, tasks=None):
    """Per set one criterion, one wording: P(yes) an uninformative 0.5 ± noise; the states carry
    the truth along a shared direction (``carried``) or along an axis of the set's own,
    orthogonal to every other set's; ``tasks`` maps a set to its task (else its own), and sets of
    one task share their axis."""
    tasks = tasks or {}
    shared = rng.normal(size=dims)
    out = []
    for s in sets:
        y = np.repeat([0, 1], n // 2)
        own = 3.0 * np.eye(dims)[sorted(set(tasks.get(t, t) for t in sets)).index(tasks.get(s, s))]
        direction = shared if carried else own
        h = rng.normal(size=(n, dims)) + np.outer(2 * y - 1, direction)
        p_yes = np.clip(0.5 + rng.normal(scale=0.05, size=n), 0.01, 0.99)
        out.append({"set": s, "task": tasks.get(s, s), "criterion": "c", "wording": 0, "y": y, "p_yes": p_yes,
                    "states": {"last": h, 14: h, 18: h}})
    return out


def test_a_shared_direction_is_learnt_across_sets_and_beats_zero_shot():
    rng = np.random.default_rng(0)
    res = gh.evaluate(_reads(rng, ["a", "b", "c", "d"], carried=True), ["platt", "probe/18"], components=8, boot=50)
    probe, platt = res["mean"]["probe/18"], res["mean"]["platt"]
    assert probe["accuracy"][0] > 0.9 and probe["accuracy_minus_zero_shot"][1] > 0.3
    assert platt["accuracy"][0] < 0.7   # P(yes) says nothing: recalibrating it cannot help
    assert set(res["tasks"]) == {"a", "b", "c", "d"} and res["tasks"]["a"]["reads"] == 40


def test_a_direction_of_the_held_out_set_alone_is_not_learnt():
    rng = np.random.default_rng(1)
    res = gh.evaluate(_reads(rng, ["a", "b", "c", "d"], carried=False), ["probe/18"], components=8, boot=50)
    assert res["mean"]["probe/18"]["accuracy"][0] < 0.7


def test_layers_of():
    assert gh.layers_of("probe/18+last") == [18, "last"] and gh.layers_of("platt") == []


def test_sets_of_one_task_are_held_out_together(monkeypatch):
    """Two sets over the same rows (one task) are scored together, and the probe that scores them
    is fitted on neither."""
    reads = _reads(np.random.default_rng(2), ["a", "a2", "b", "c"], True, tasks={"a2": "a"})
    fitted_on = []
    fit = gh.fit_readout
    monkeypatch.setattr(gh, "fit_readout", lambda train, *a: fitted_on.append({r["set"] for r in train}) or fit(train, *a))
    res = gh.evaluate(reads, ["probe/18"], components=8, boot=50)
    assert list(res["tasks"]) == ["a", "b", "c"] and res["tasks"]["a"]["reads"] == 80
    assert fitted_on == [{"b", "c"}, {"a", "a2", "c"}, {"a", "a2", "b"}]


def test_content_free_states_remove_a_per_question_offset():
    """Each question shifts every state along the truth direction by its own amount (a bias no
    threshold learnt across tasks can undo); the content-free read carries the same shift, so the
    probe on states minus content-free states answers where the plain probe cannot."""
    rng = np.random.default_rng(3)
    dims, n = 24, 40
    d = rng.normal(size=dims)
    d /= np.linalg.norm(d)
    reads = []
    for s in ["a", "b", "c", "d", "e", "f"]:
        y = np.repeat([0, 1], n // 2)
        offset = rng.normal(size=dims) + d * rng.normal(scale=4.0)
        h = rng.normal(size=(n, dims)) * 0.5 + np.outer(2 * y - 1, 1.5 * d) + offset
        p_yes = np.clip(0.5 + rng.normal(scale=0.05, size=n), 0.01, 0.99)
        cf = {"p_yes": np.full(n, 0.5), "states": {18: np.tile(offset, (n, 1))}}
        reads.append({"set": s, "task": s, "criterion": "c", "wording": 0, "y": y, "p_yes": p_yes,
                      "states": {18: h}, "cf": cf})
    res = gh.evaluate(reads, ["probe/18", "probe-cf/18", "cc"], components=8, boot=50)
    assert res["mean"]["probe-cf/18"]["accuracy"][0] > 0.9
    assert res["mean"]["probe/18"]["accuracy"][0] < 0.8
    assert res["mean"]["cc"]["accuracy"][0] < 0.7   # the content-free P(yes) says nothing here


def test_readout_layers():
    assert gh.layers_of("probe-cf/18+last") == [18, "last"] and gh.layers_of("cc") == []


def test_the_tasks_resampled_interval_is_wider_when_tasks_disagree():
    """Half the tasks carry their truth along the shared direction, half along their own: over
    these tasks fixed the probe gains, resampling the tasks the interval reaches below that."""
    rng = np.random.default_rng(4)
    reads = _reads(rng, ["a", "b", "c", "d"], True) + _reads(rng, ["e", "f", "g", "h"], False)
    res = gh.evaluate(reads, ["probe/18"], components=8, boot=200)["mean"]["probe/18"]
    rows, tasks = res["accuracy_minus_zero_shot"], res["accuracy_minus_zero_shot_over_tasks"]
    assert abs(rows[0] - tasks[0]) < 1e-3   # the same mean of the tasks' differences
    assert tasks[2] - tasks[1] > 2 * (rows[2] - rows[1])
    better, worse = res["tasks_better_worse"]
    assert better >= 4 and worse >= 1   # the shared tasks all gain; some of the others lose
