"""cpu.engine_threads: an engine's ONNX Runtime threads — the call's, else TYPED_DECISIONS_THREADS,
else every usable core — and a bad environment value refused by name."""

from __future__ import annotations

import pytest

from typed_decisions.cpu import THREADS_ENV, engine_threads, usable_cores


def test_the_call_wins_then_the_environment_then_the_usable_cores(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    assert engine_threads(5) == 5 and engine_threads() == engine_threads(None) == 3
    monkeypatch.delenv(THREADS_ENV)
    assert engine_threads() == usable_cores() >= 1


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_a_bad_environment_value_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(THREADS_ENV, bad)
    with pytest.raises(ValueError, match=f"TYPED_DECISIONS_THREADS={bad!r}: a whole number"):
        engine_threads()


def test_an_engine_opens_its_session_with_those_threads(monkeypatch, tiny_model_dir):
    import onnxruntime as ort

    from typed_decisions.artifacts import load_artifacts
    from typed_decisions.engine.backbone import Backbone

    seen = []
    real = ort.InferenceSession

    def spy(path, sess_options=None, **kw):
        seen.append(sess_options.intra_op_num_threads)
        return real(path, sess_options=sess_options, **kw)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    monkeypatch.setenv(THREADS_ENV, "1")
    Backbone(load_artifacts(tiny_model_dir))
    Backbone(load_artifacts(tiny_model_dir), threads=2)
    assert seen == [1, 2]


def test_each_test_process_keeps_to_its_share_of_the_cores():
    """The xdist controller loads tests/conftest.py too, and its workers inherit its environment:
    each worker must still get cores // workers threads (torch's, and every engine's), not the
    controller's every core."""
    import os

    from td_threads import THREADS, WORKERS

    from typed_decisions.cpu import usable_cores

    assert THREADS == (int(os.environ["TD_TEST_THREADS"]) if os.environ.get("TD_TEST_THREADS")
                       else max(1, usable_cores() // WORKERS))
    assert os.environ["OMP_NUM_THREADS"] == os.environ[THREADS_ENV] == str(THREADS)
    assert engine_threads() == THREADS
    torch = pytest.importorskip("torch")
    assert torch.get_num_threads() == THREADS
