"""INT8: drift measured and recorded, refusal above the threshold, and the CLI's int8 path.

The drift is measured on the tiny REAL model (SmolLM2-135M), where it means something; random tiny
models only exercise the mechanics (with --force, since their drift is arbitrary).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from td_threads import THREADS

import typed_decisions_export.int8.pipeline as pipeline_mod
from typed_decisions_export.int8.options import SMOOTH_DEFAULT
from typed_decisions_export.int8.smoothquant import excluded_nodes
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
    # The default: every MatMul but down_proj quantized per token with 8-bit weights; down_proj
    # float32 (its outlier inputs are the largest source of drift, docs/export.md).
    assert SMOOTH_DEFAULT is None and q["smoothing"] is None and q["activations"] == "per_token"
    assert q["excluded"] == [f"layers.{i}.mlp.down_proj" for i in range(30)] and q["quantized"] == 30 * 6
    assert q["integer_format"]["pair_bound"] == 2 * 255 * 127 and q["integer_format"]["exact_without_vnni"] is False
    assert q["graphs"] == {"u8s8": "model.int8.onnx", "u8u8": "model.int8.u8u8.onnx"}
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
    assert {"model.int8.onnx", "model.int8.u8u8.onnx", "lm_head.npy", "tokenizer.json", "chat_template.jinja"} <= names
    assert "model.onnx" not in names and "model.onnx.data" not in names
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    assert manifest["quantization"]["source_onnx_sha256"] == smollm2_export[1]["files"]["model.onnx"]
    int8_bytes = sum((out / n).stat().st_size for n in names if n.startswith("model.int8.onnx"))
    fp32_bytes = sum((smollm2_export[0] / n).stat().st_size for n in ("model.onnx", "model.onnx.data"))
    assert int8_bytes < 0.6 * fp32_bytes
    art = load_artifacts(out)
    assert art.onnx_path.name == "model.int8.onnx"


def test_int8_runs_the_graph_whose_kernel_is_exact_on_the_cpu(smollm2_int8, monkeypatch):
    """8-bit weights: VNNI/AMX run the u8*s8 graph, every other CPU the u8*u8 one over the same
    weights; both compute the same integers, so where both are exact (VNNI/AMX) they answer the
    same. On a CPU without VNNI the export itself was measured on the u8*u8 graph (graphs_agree
    is then not measured: the u8*s8 graph saturates there)."""
    import typed_decisions.quantized as quantized
    from typed_decisions import Decider
    from typed_decisions.cpu import cpu_class

    out, manifest = smollm2_int8
    q = manifest["quantization"]
    native = Decider.from_dir(out, threads=THREADS)
    here = cpu_class()
    assert native.engine.backbone.onnx_path.name == ("model.int8.onnx" if here in quantized.EXACT_CLASSES else "model.int8.u8u8.onnx")
    if here not in quantized.EXACT_CLASSES:
        assert q["graphs_agree"] is None
        return
    assert q["graphs_agree"]["graph"] == "model.int8.u8u8.onnx" and q["graphs_agree"]["max_abs_prob"] <= 1e-5
    monkeypatch.setattr(quantized, "cpu_class", lambda: "avx2")  # what an AVX2 machine loads
    avx2 = Decider.from_dir(out, threads=THREADS)
    assert avx2.engine.backbone.onnx_path.name == "model.int8.u8u8.onnx"
    assert avx2.engine.cpu_check["cpu"] == "avx2" and avx2.engine.cpu_check["max_abs_prob"] <= 1e-5
    request = {"model": "tiny", "state": "The invoice was paid twice; please refund one.", "questions": {
        "team": {"type": "choice", "criteria": {"billing": "Payments", "technical": "Bugs", "sales": "Buying"}},
        "urgent": {"type": "noul", "instructions": "Is it urgent?"}}}
    a, b = native.probabilities(request), avx2.probabilities(request)
    for name in a:
        assert np.abs(np.asarray(a[name]) - np.asarray(b[name])).max() <= 1e-5, name


def test_8_bit_weights_without_a_u8u8_graph_are_refused_without_vnni(smollm2_int8, tmp_path, monkeypatch):
    """An export that only has the u8*s8 graph of 8-bit weights computes wrong integers on a CPU
    without VNNI/AMX: refused there with what to do, never served."""
    import shutil

    import typed_decisions.quantized as quantized
    from typed_decisions import Decider
    from typed_decisions.errors import EngineError

    out, manifest = smollm2_int8
    dst = tmp_path / "old"
    shutil.copytree(out, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["quantization"]["graphs"] = None
    del manifest["files"]["model.int8.u8u8.onnx"]
    (dst / "model.int8.u8u8.onnx").unlink()
    (dst / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(quantized, "cpu_class", lambda: "avx2")
    import typed_decisions.engine.backbone as backbone

    def never(*args, **kwargs):
        raise AssertionError("a graph of an export this CPU cannot compute was loaded")

    monkeypatch.setattr(backbone.ort, "InferenceSession", never)  # refused before any graph is loaded
    with pytest.raises(EngineError, match="no u8\\*u8 graph"):
        Decider.from_dir(dst, threads=THREADS)


def test_drift_above_threshold_is_refused(tiny_exports, tmp_path, monkeypatch):
    """With a threshold nothing can meet, quantize_export refuses, leaves out_dir empty and the
    float32 source untouched."""
    src, manifest = tiny_exports["qwen2"]
    before = (src / "manifest.json").read_text()
    monkeypatch.setattr(pipeline_mod, "THRESHOLD", {"max_abs_prob": -1.0, "decisive_flips": 0})
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
    # By default down_proj stays float32; the other MatMuls get 8-bit weights and a u8*u8 twin graph.
    assert manifest["quantization"]["excluded"] == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    assert manifest["quantization"]["smoothing"] is None
    assert {"model.int8.onnx", "model.int8.u8u8.onnx"} <= set(manifest["files"])
    assert set(manifest["files"]) == {p.name for p in out.iterdir() if p.name != "manifest.json"}
    assert not (out / "model.onnx").exists()
    assert manifest["self_check"]["graph"].startswith("model.onnx (float32")


@pytest.mark.int8_u8s8("two per-tensor u8*s8 graphs compared on the same kernel")
def test_streaming_quantizer_equals_onnxruntime_quantize_dynamic(smollm2_export, tmp_path):
    """Oracle: with per-tensor activations, the study writer (export/studies) writes the graph quantize_dynamic writes
    (per-channel, MatMul weights, down_proj excluded), so ONNX Runtime computes identical hidden
    states from both."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from td_studies import int8_variants
    from typed_decisions_export.ort_backbone import OrtBackbone

    src, manifest = smollm2_export
    nodes, _ = excluded_nodes(src / "model.onnx")
    assert int8_variants().quantize_matmuls_study(src / "model.onnx", tmp_path / "mine.onnx", exclude=set(nodes),
                                                  activations="per_tensor", log=lambda m: None) == 180  # 30 layers x 6
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

    from typed_decisions_export.int8.integer import quantize_weight_per_column

    w = np.random.default_rng(0).normal(size=(64, 24)).astype(np.float32)  # (K, N)
    w[:, 3] = 0.0  # an all-zero column must not divide by zero
    q, scale = quantize_weight_per_column(w)
    for n in range(w.shape[1]):
        zp, s, ref = quantize_data(w[:, n], TensorProto.INT8, symmetric=True)
        assert int(zp) == 0
        if n != 3:
            assert np.isclose(scale[n], s, rtol=1e-6)
        np.testing.assert_array_equal(q[:, n], ref)
