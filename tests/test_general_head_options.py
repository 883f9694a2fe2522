"""benchmarks/general_head_options.py (choice and score as one criterion per option, the noul probe softmaxed)
and benchmarks/general_head_reference.py (a reference from the task's unlabelled rows), on
synthetic reads."""

import numpy as np

from benchmarks import general_head as gh
from benchmarks import general_head_options as gho
from benchmarks.general_head_reference import with_reference, with_share
from typed_decisions.spec import OptionSpec, QuestionSpec

DIMS = 16


def _pool(rng, shared, tasks):
    """Noul reads whose states carry the truth along ``shared``; P(yes) says nothing."""
    out = []
    for t in tasks:
        y = np.repeat([0, 1], 20)
        h = rng.normal(size=(40, DIMS)) + np.outer(2 * y - 1, shared)
        out.append({"set": t, "task": t, "criterion": "c", "wording": 0, "y": y,
                    "p_yes": np.clip(0.5 + rng.normal(scale=0.05, size=40), 0.01, 0.99), "states": {18: h}})
    return out


def _choice_set(rng, shared, name, k=3, n=30):
    """A choice set whose verbalized answer is uniform noise and whose option reads carry "this
    option is the gold one" along ``shared`` (two wordings)."""
    gold = np.arange(n) % k
    wordings = []
    for _ in range(2):
        options = []
        for o in range(k):
            h = rng.normal(size=(n, DIMS)) + np.outer(np.where(gold == o, 1, -1), shared)
            options.append({"p_yes": np.full(n, 0.5), "states": {18: h}})
        wordings.append(options)
    choice = rng.dirichlet(np.ones(k), size=n)
    return {"set": name, "task": name, "gold": gold, "verbalized": choice, "options": wordings}


def test_option_criteria_are_written_from_the_question_alone():
    spec = QuestionSpec(type="choice", instructions="Which team?",
                        options=[OptionSpec(name="red", description="the home side"), OptionSpec(name="blue")])
    first = gho.option_criteria(spec, gho.WORDINGS[0])
    assert first == ["Which team?\nIs the answer “red” (the home side)?", "Which team?\nIs the answer “blue”?"]
    assert all(len(gho.option_criteria(spec, w)) == 2 for w in gho.WORDINGS)


def test_the_probe_answers_a_choice_from_its_options_and_is_fitted_without_the_held_out_task(monkeypatch):
    rng = np.random.default_rng(0)
    shared = rng.normal(size=DIMS)
    pool = _pool(rng, shared, ["a", "b", "c", "x"])
    sets = [_choice_set(rng, shared, "x"), _choice_set(rng, shared, "y", k=4)]
    fitted_on = []
    fit = gh.fit_readout
    monkeypatch.setattr(gh, "fit_readout", lambda train, *a: fitted_on.append({r["task"] for r in train}) or fit(train, *a))
    res = gho.evaluate(sets, pool, ["probe/18"], components=8, boot=50)
    assert fitted_on == [{"a", "b", "c"}, {"a", "b", "c", "x"}]   # set x's own criteria never seen
    probe, zero = res["mean"]["probe/18"], res["mean"]["zero_shot"]
    assert probe["accuracy"][0] > 0.9 and zero["accuracy"][0] < 0.6
    assert res["mean"]["noul-zs"]["accuracy"][0] < 0.6           # P(yes) is 0.5 for every option
    assert res["tasks"]["y"]["options"] == 4 and probe["tasks_better_worse"] == [2, 0]


def test_option_logits_average_the_wordings():
    read = {"options": [[{"p_yes": np.array([0.5]), "states": {}}, {"p_yes": np.array([0.9]), "states": {}}],
                        [{"p_yes": np.array([0.5]), "states": {}}, {"p_yes": np.array([0.5]), "states": {}}]]}
    logits = gho.option_logits(read, "noul-zs")
    assert np.allclose(logits, [[0.0, np.log(9) / 2]])


def test_a_reference_takes_its_share_of_true_rows_and_is_their_mean():
    y = np.repeat([0, 1], 50)
    states = np.arange(100, dtype=float)[:, None] * np.ones((1, 3))
    read = {"y": y, "p_yes": np.where(y == 1, 0.8, 0.2), "states": {18: states}}
    for share, expect in ((0.25, 0.5), (1.0, 1.0)):   # 5 true rows of 20, or all 20 true
        ref = with_reference(read, 20, share, np.random.default_rng(0))
        zl = np.log(0.8 / 0.2)
        mean_zl = share * zl - (1 - share) * zl
        assert np.allclose(gh._zl(ref["cf"]["p_yes"]), mean_zl)
        mean_state = ref["cf"]["states"][18][0, 0]
        assert ref["cf"]["states"][18].shape == states.shape and np.all(ref["cf"]["states"][18] == mean_state)
        assert (mean_state >= 50) == (expect == 1.0) and read["states"][18] is states   # the read is not altered


def test_a_natural_prior_scores_rows_with_the_references_share():
    y = np.repeat([0, 1], 32)
    states = np.arange(64, dtype=float)[:, None]
    read = {"y": y, "p_yes": np.where(y == 1, 0.8, 0.2), "states": {18: states}}
    for share, (n_true, n_false) in ((0.8, (32, 8)), (0.2, (8, 32)), (0.5, (32, 32)), (0.95, (32, 2))):
        kept = with_share(read, share, np.random.default_rng(1))
        assert (int(kept["y"].sum()), int((kept["y"] == 0).sum())) == (n_true, n_false)
        assert np.all(kept["p_yes"] == np.where(kept["y"] == 1, 0.8, 0.2))           # rows stay whole
        assert np.all((kept["states"][18][:, 0] >= 32) == (kept["y"] == 1))
    ref = with_reference(read, 20, 0.8, np.random.default_rng(2), natural=True)
    assert ref["y"].size == 40 and ref["cf"]["states"][18].shape == (40, 1)
    # the reference: 20 of the 40 rows kept, drawn whatever their classes (the share of true rows in
    # it varies around the rows' 0.8), where the balanced prior draws exactly 16 true rows
    read["states"] = {18: y[:, None].astype(float)}
    shares = [with_reference(read, 20, 0.8, np.random.default_rng(s), natural=True)["cf"]["states"][18][0, 0]
              for s in range(200)]
    assert abs(np.mean(shares) - 0.8) < 0.02 and np.std(shares) > 0.03
    assert with_reference(read, 20, 0.8, np.random.default_rng(0))["cf"]["states"][18][0, 0] == 0.8
    assert read["y"].size == 64                                                          # not altered
