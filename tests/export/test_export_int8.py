"""INT8: drift measured and recorded, refusal above the threshold, and the CLI's int8 path.

The drift is measured on the tiny REAL model (SmolLM2-135M), where it means something; random tiny
models only exercise the mechanics (with --force, since their drift is arbitrary).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import typed_decisions_export.quantize as quantize_mod
from typed_decisions_export import QuantizationError, quantize_export
from typed_decisions_export.cli import main


@pytest.fixture(scope="session")
def smollm2_int8(tiny_int8_model_dir):
    """SmolLM2 quantized from its cached float32 export, with force (the drift is what we test)."""
    return tiny_int8_model_dir, json.loads((tiny_int8_model_dir / "manifest.json").read_text())


def test_smollm2_int8_drift_is_measured_and_judged(smollm2_int8):
    out, manifest = smollm2_int8
    q = manifest["quantization"]
    assert manifest["onnx_file"] == "model.int8.onnx"
    assert q["method"] == "dynamic-int8" and q["per_channel"] is True
    # The default since SmoothQuant: every down_proj smoothed and quantized (per token), none float32.
    assert q["excluded"] == [] and q["quantized"] == 30 * 7
    sm = q["smoothing"]
    assert sm["alpha"] == quantize_mod.SMOOTH_DEFAULT and sm["activations"] == "per_token"
    assert sm["smoothed"] == [f"layers.{i}.mlp.down_proj" for i in range(30)]  # inside the backbone
    drift = q["drift"]
    assert drift["probes"] == 8 and drift["candidates"] == 5
    assert 0.0 <= drift["max_abs_prob"] <= 1.0 and 0 <= drift["top1_flips"] <= 8
    # The verdict follows the stated threshold, and `forced` says when it was overridden.
    within = drift["max_abs_prob"] <= q["threshold"]["max_abs_prob"] and drift["decisive_flips"] <= q["threshold"]["decisive_flips"]
    assert q["passed"] is within and q["forced"] is (not within)
    # The recorded tables reproduce the recorded numbers (decisive = float32 margin >= 0.20).
    p32, p8 = np.array(q["probabilities"]["float32"]), np.array(q["probabilities"]["int8"])
    assert p32.shape == p8.shape == (8, 5)
    assert abs(np.abs(p32 - p8).max() - drift["max_abs_prob"]) < 1e-3
    assert int((p32.argmax(1) != p8.argmax(1)).sum()) == drift["top1_flips"] >= drift["decisive_flips"]
    # A quantization that broke the model (wrong scales, a quantized LM path gone wrong) moves
    # probabilities by ~1 and flips most answers; the measured drift must stay well clear of that.
    assert drift["max_abs_prob"] < 0.35 and drift["top1_flips"] <= 2
    # Float32 does not depend on batching or on cache splits; INT8 may (per-call activation scales).
    for dep in ("batch_dependence", "cache_dependence"):
        assert q[dep]["float32"]["max_abs_prob"] < 1e-4 and q[dep]["float32"]["top1_flips"] == 0
        assert 0.0 <= q[dep]["int8"]["max_abs_prob"] <= 1.0


def test_smollm2_int8_directory(smollm2_int8, smollm2_export):
    from typed_decisions.artifacts import load_artifacts

    out, manifest = smollm2_int8
    names = {p.name for p in out.iterdir() if p.name != "manifest.json" and not p.name.startswith(".")}
    assert set(manifest["files"]) == names
    assert {"model.int8.onnx", "lm_head.npy", "tokenizer.json", "chat_template.jinja"} <= names
    assert "model.onnx" not in names and "model.onnx.data" not in names
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    assert manifest["quantization"]["source_onnx_sha256"] == smollm2_export[1]["files"]["model.onnx"]
    int8_bytes = sum((out / n).stat().st_size for n in names if n.startswith("model.int8.onnx"))
    fp32_bytes = sum((smollm2_export[0] / n).stat().st_size for n in ("model.onnx", "model.onnx.data"))
    assert int8_bytes < 0.6 * fp32_bytes
    art = load_artifacts(out)
    assert art.onnx_path.name == "model.int8.onnx"


def test_drift_above_threshold_is_refused(tiny_exports, tmp_path, monkeypatch):
    """With a threshold nothing can meet, quantize_export refuses, leaves out_dir empty and the
    float32 source untouched."""
    src, manifest = tiny_exports["qwen2"]
    before = (src / "manifest.json").read_text()
    monkeypatch.setattr(quantize_mod, "THRESHOLD", {"max_abs_prob": -1.0, "decisive_flips": 0})
    out = tmp_path / "int8"
    with pytest.raises(QuantizationError, match="drift above threshold"):
        quantize_export(src, out, progress=False)
    assert list(out.iterdir()) == []
    assert (src / "manifest.json").read_text() == before
    assert (src / "model.onnx").is_file()


def test_cli_int8_in_place_with_force(tiny_folders, tmp_path, capsys):
    out = tmp_path / "cli-int8"
    rc = main([str(tiny_folders["llama"]), "--out", str(out), "--quantize", "int8", "--force", "--name", "t", "--quiet"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["name"] == "t" and summary["onnx_file"] == "model.int8.onnx" and summary["self_check_passed"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["quantization"]["excluded"] == []  # SmoothQuant by default: down_proj quantized too
    assert manifest["quantization"]["smoothing"]["smoothed"] == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    assert set(manifest["files"]) == {p.name for p in out.iterdir() if p.name != "manifest.json"}
    assert not (out / "model.onnx").exists()
    assert manifest["self_check"]["graph"].startswith("model.onnx (float32")


def test_streaming_quantizer_equals_onnxruntime_quantize_dynamic(smollm2_export, tmp_path):
    """Oracle: with per-tensor activations, int8_matmul writes the graph quantize_dynamic writes
    (per-channel, MatMul weights, down_proj excluded), so ONNX Runtime computes identical hidden
    states from both."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from typed_decisions_export.int8_matmul import quantize_matmuls
    from typed_decisions_export.ort_backbone import OrtBackbone

    src, manifest = smollm2_export
    nodes, _ = quantize_mod._excluded_nodes(src / "model.onnx")
    assert quantize_matmuls(src / "model.onnx", tmp_path / "mine.onnx", exclude=set(nodes), activations="per_tensor",
                            log=lambda m: None) == 180  # 30 layers x 6
    quantize_dynamic(
        src / "model.onnx", tmp_path / "ort.onnx", op_types_to_quantize=["MatMul"], per_channel=True,
        weight_type=QuantType.QInt8, nodes_to_exclude=nodes, use_external_data_format=True,
        extra_options={"MatMulConstBOnly": True},
    )
    ids = [1, 9690, 198, 2683, 359, 253, 5356, 2, 198, 1, 4093, 198, 59, 2, 198, 1, 520, 9531, 198]
    mine, _ = OrtBackbone(tmp_path / "mine.onnx").prefill(ids)
    ref, _ = OrtBackbone(tmp_path / "ort.onnx").prefill(ids)
    np.testing.assert_allclose(mine, ref, rtol=0, atol=1e-5)


def test_weight_quantization_matches_onnxruntime_per_channel():
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data

    from typed_decisions_export.int8_matmul import quantize_weight_per_column

    w = np.random.default_rng(0).normal(size=(64, 24)).astype(np.float32)  # (K, N)
    w[:, 3] = 0.0  # an all-zero column must not divide by zero
    q, scale = quantize_weight_per_column(w)
    for n in range(w.shape[1]):
        zp, s, ref = quantize_data(w[:, n], TensorProto.INT8, symmetric=True)
        assert int(zp) == 0
        if n != 3:
            assert np.isclose(scale[n], s, rtol=1e-6)
        np.testing.assert_array_equal(q[:, n], ref)
