"""The kept studies that reach into engine internals still run (benchmarks/studies/): prefill_chunks'
re-stacking baseline answers as the engine does (rows are independent: to 1e-5) on the tiny model."""

from __future__ import annotations

import pytest

from benchmarks.harness import problems, read_results

pytestmark = pytest.mark.model


def test_prefill_chunks_restacking_answers_as_the_engine(tmp_path, tiny_model_dir):
    import json

    from benchmarks.studies import prefill_chunks

    out = tmp_path / "chunks.json"
    assert prefill_chunks.main(["--model", str(tiny_model_dir), "--tokens", "900", "--chunk", "256",
                                "--trials", "1", "--out", str(out)]) == 0
    res = read_results(out)
    assert problems(json.loads(out.read_text())) == []
    assert res["prompt_tokens"] > 3 * 256, res  # long enough to be chunked: the baseline really ran
    assert res["max_abs_dp"] <= 1e-5, res
