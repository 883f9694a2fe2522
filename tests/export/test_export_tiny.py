"""Exports of tiny random-weight models of each supported architecture, checked against the format.

Each architecture is exported once per session (conftest.tiny_exports, ~10 s each on 2 cores).
The self-check inside the export already compares ONNX Runtime with transformers; these tests
check that it ran and passed, that the directory matches docs/FORMAT.md, and a few properties
directly (full-length caches on sliding-window layers, an empty past, hashes, the LM head).
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from td_threads import THREADS
from tiny_models import ARCHES, CHATML

import typed_decisions_export
from typed_decisions_export import ExportError, SelfCheckError, export_model
from typed_decisions_export.builder.decoder import hidden_layer_set
from typed_decisions_export.ort_backbone import OrtBackbone
from typed_decisions_export.selfcheck import TOLERANCES

CHECKS = ("prefill", "left_padded_batch", "cached_step_1", "cached_step_3", "right_padded_suffixes")
MANIFEST_KEYS = {
    "format_version", "name", "architecture", "onnx_file", "attention_mask", "dtype", "opset", "graph_rewrites",
    "hidden_layers", "quantization", "lm_head", "tokenizer", "source", "versions", "export", "self_check", "files",
}
ARCH_KEYS = {
    "model_type", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "hidden_size",
    "vocab_size", "sliding_window", "final_logit_softcapping", "logit_scale", "max_position_embeddings",
}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_public_api_is_pinned():
    assert typed_decisions_export.__all__ == [
        "ExportError", "Int8Options", "QuantizationError", "SelfCheckError", "__version__", "export_model",
        "quantize_export",
    ]


@pytest.mark.parametrize("arch", ARCHES)
def test_export_passes_self_check(tiny_exports, arch):
    out, manifest = tiny_exports[arch]
    check = manifest["self_check"]
    assert check["passed"] and not check["failures"]
    assert check["tolerances"] == TOLERANCES
    for name in CHECKS:
        result = check["results"][name]
        assert result["rows"] == 3
        for key in ("hidden_rel", "logits_rel", "prob_abs"):
            assert 0.0 <= result[key] <= TOLERANCES[key], (name, key, result[key])
    assert check["results"]["tokenizer"]["mismatches"] == 0
    # The prompts are longer than Gemma3's and Mistral's window of 8, so the windows really apply.
    assert min(check["results"]["prompt_lengths"]) > 8


@pytest.mark.parametrize("arch", ARCHES)
def test_directory_matches_format(tiny_exports, tiny_folders, arch):
    out, manifest = tiny_exports[arch]
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert set(manifest) == MANIFEST_KEYS
    assert set(manifest["architecture"]) == ARCH_KEYS
    assert manifest["opset"] >= 18
    # A 4-D (tree) mask except where it would bypass a sliding window (format version 2 vs 1),
    # and the graph really takes what the manifest says.
    sliding = manifest["architecture"]["sliding_window"] is not None
    assert (manifest["attention_mask"], manifest["format_version"]) == (("2d", 1) if sliding else ("4d", 2))
    assert OrtBackbone(out / "model.onnx").mask_4d == (not sliding)
    # HF folders of a known family are written by the graph builder (--builder auto, the default),
    # which writes no softmax NaN guard (its bias is the lowest float32, softmax_guard.py), so there
    # is none to drop, 4-D or 2-D; the traced graphs' guards: tests/export/test_builder.py.
    import onnx

    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    ops = [n.op_type for n in graph.node]
    assert manifest["export"]["graph"] == "builder"
    # the builder's mid-layer outputs (--hidden-layers auto), after the format's core outputs
    n = manifest["architecture"]["num_layers"]
    assert manifest["hidden_layers"] == hidden_layer_set(n) != []
    assert [o.name for o in graph.output][1 + 2 * n :] == [f"hidden_state.{k}" for k in manifest["hidden_layers"]]
    assert manifest["graph_rewrites"]["softmax_nan_guards_dropped"] == 0 and "IsNaN" not in ops
    assert manifest["onnx_file"] == "model.onnx" and manifest["dtype"] == "float32"
    assert manifest["quantization"] is None
    assert manifest["source"]["kind"] == "hf_folder" and len(manifest["source"]["sha256"]) == 64
    assert manifest["export"]["seconds"] > 0 and manifest["export"]["peak_rss_bytes"] > 0
    assert set(manifest["versions"]) >= {"torch", "transformers", "onnx", "onnxruntime", "typed_decisions_export"}

    # files: every file but manifest.json, with its sha256
    on_disk = {p.name for p in out.iterdir() if p.name != "manifest.json" and not p.name.startswith(".")}
    assert set(manifest["files"]) == on_disk == {
        "model.onnx", "model.onnx.data", "lm_head.npy", "tokenizer.json", "chat_template.jinja",
    }
    for name, digest in manifest["files"].items():
        assert sha256(out / name) == digest, name

    # LM head: (vocab, hidden) float32, C order, equal to the model's own output embedding
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_folders[arch])
    lm_head = np.load(out / "lm_head.npy", mmap_mode="r")
    arch_facts = manifest["architecture"]
    assert lm_head.dtype == np.float32 and lm_head.flags.c_contiguous
    assert list(lm_head.shape) == manifest["lm_head"]["shape"] == [arch_facts["vocab_size"], arch_facts["hidden_size"]]
    np.testing.assert_array_equal(lm_head, model.get_output_embeddings().weight.detach().numpy())
    assert arch_facts["num_layers"] == 2 and arch_facts["hidden_size"] == 64

    # tokenizer facts
    tok = manifest["tokenizer"]
    assert (out / "chat_template.jinja").read_text() == CHATML
    assert tok["chat_template_file"] == "chat_template.jinja"
    assert tok["add_bos_token"] is (arch in ("llama", "gemma3"))
    assert tok["eos_token"] == "<|im_end|>" and tok["pad_token"] == "<|endoftext|>"
    assert {"<|im_start|>", "<|im_end|>", "<|endoftext|>"} <= set(tok["special_tokens"])
    from tokenizers import Tokenizer

    rust = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert all(rust.token_to_id(t) == i for t, i in tok["special_tokens"].items())


def test_architecture_facts(tiny_exports):
    gemma = tiny_exports["gemma3"][1]["architecture"]
    assert gemma["sliding_window"] == 8 and gemma["final_logit_softcapping"] == 30.0 and gemma["num_kv_heads"] == 1
    assert tiny_exports["mistral"][1]["architecture"]["sliding_window"] == 8
    assert tiny_exports["qwen2"][1]["architecture"]["sliding_window"] is None
    assert tiny_exports["qwen3"][1]["architecture"]["head_dim"] == 16


@pytest.mark.parametrize("arch", ["gemma3", "mistral"])
def test_sliding_window_layers_keep_the_full_past(tiny_exports, arch):
    """Window 8, 20-token prefill then a 3-token step: every present has every position."""
    out, _ = tiny_exports[arch]
    ort = OrtBackbone(out / "model.onnx")
    ids = list(range(10, 30))
    hidden, present = ort.prefill(ids)
    assert hidden.shape == (1, 20, 64)
    assert all(p.shape == (1, ort.num_kv_heads, 20, ort.head_dim) for p in present)
    step = np.array([[40, 41, 42]])
    hidden2, present2 = ort.run(step, np.ones((1, 23), np.int64), np.arange(20, 23)[None], present)
    assert hidden2.shape == (1, 3, 64)
    assert all(p.shape[2] == 23 for p in present2)
    # ...and the step equals the uncached run of all 23 tokens at its last position.
    full, _ = ort.prefill(ids + [40, 41, 42])
    np.testing.assert_allclose(hidden2[0, -1], full[0, -1], atol=1e-4)


def test_onnx_graph_io(tiny_exports):
    out, manifest = tiny_exports["qwen2"]
    ort = OrtBackbone(out / "model.onnx")
    inputs = {i.name: i for i in ort.session.get_inputs()}
    assert list(inputs)[:3] == ["input_ids", "attention_mask", "position_ids"]
    n = manifest["architecture"]["num_layers"]
    assert list(inputs)[3:] == [f"past_key_values.{i}.{kv}" for i in range(n) for kv in ("key", "value")]
    assert ort.output_names == ["last_hidden_state"] + [f"present.{i}.{kv}" for i in range(n) for kv in ("key", "value")]
    assert inputs["input_ids"].type == "tensor(int64)" and inputs["past_key_values.0.key"].type == "tensor(float)"
    # batch, sequence and past are symbolic, heads and head_dim fixed
    assert all(isinstance(d, str) for d in inputs["input_ids"].shape)
    shape = inputs["past_key_values.0.key"].shape
    assert isinstance(shape[0], str) and isinstance(shape[2], str) and shape[1] == 2 and shape[3] == 16


def test_the_exporters_sessions_keep_to_the_runtimes_thread_count(tiny_exports, monkeypatch):
    """The self-check, drift and adoption sessions use typed_decisions.cpu.engine_threads, not ONNX
    Runtime's default (every physical core), so test workers and containers sharing cores do
    not oversubscribe them."""
    out, _ = tiny_exports["qwen2"]
    assert OrtBackbone(out / "model.onnx").session.get_session_options().intra_op_num_threads == THREADS
    monkeypatch.setenv("TYPED_DECISIONS_THREADS", "3")
    assert OrtBackbone(out / "model.onnx").session.get_session_options().intra_op_num_threads == 3
    assert OrtBackbone(out / "model.onnx", threads=2).session.get_session_options().intra_op_num_threads == 2


def test_runtime_loads_export_and_refuses_corruption(tiny_exports, tmp_path):
    """The runtime's loader verifies the hashes this exporter writes; a flipped byte is refused."""
    from typed_decisions.artifacts import load_artifacts
    from typed_decisions.errors import ArtifactError

    src, manifest = tiny_exports["qwen2"]
    art = load_artifacts(src)
    assert art.architecture.num_layers == manifest["architecture"]["num_layers"]
    assert art.lm_head.shape == tuple(manifest["lm_head"]["shape"])
    for victim in ("model.onnx.data", "lm_head.npy"):
        copy = tmp_path / victim
        shutil.copytree(src, copy)
        (copy / ".verified.json").unlink(missing_ok=True)
        path = copy / victim
        before = sha256(path)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        assert sha256(path) != before == manifest["files"][victim]
        with pytest.raises(ArtifactError, match=victim.replace(".", r"\.")):
            load_artifacts(copy)


def test_failed_self_check_leaves_no_manifest(tiny_folders, tmp_path, monkeypatch):
    """A wrong LM head (rows shifted) must be caught: SelfCheckError, no manifest.json (traced path;
    tests/export/test_builder.py has the builder's)."""
    import typed_decisions_export.export as export_mod

    real = export_mod.lm_head_weight
    monkeypatch.setattr(export_mod, "lm_head_weight", lambda model: np.roll(real(model), 1, axis=0))
    out = tmp_path / "bad"
    with pytest.raises(SelfCheckError, match="logits_rel"):
        export_model(tiny_folders["qwen2"], out, progress=False, builder="off")
    assert not (out / "manifest.json").exists()
    report = json.loads((out / "self_check.failed.json").read_text())
    assert report["passed"] is False and report["failures"]


def test_out_dir_with_foreign_files_is_refused(tiny_folders, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="notes.txt"):
        export_model(tiny_folders["qwen2"], tmp_path, progress=False)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("source, message", [
    ("/nonexistent/model.gguf", "no such file"),
    ("./missing-folder/", "no such file"),
])
def test_bad_sources_are_refused(tmp_path, source, message):
    with pytest.raises(ExportError, match=message):
        export_model(source, tmp_path / "out", progress=False)


def test_folder_without_config_and_non_gguf_file_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="config.json"):
        export_model(tmp_path / "empty", tmp_path / "out", progress=False)
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ExportError, match=r"\.gguf"):
        export_model(tmp_path / "weights.bin", tmp_path / "out", progress=False)


def test_unknown_catalogue_name_is_refused(tmp_path):
    with pytest.raises(ExportError, match="no-such-model"):
        export_model("no-such-model", tmp_path / "out", progress=False)


@pytest.mark.parametrize("arch", ARCHES)
def test_engine_tree_blocks_match_transformers(tiny_exports, tiny_folders, arch):
    """The runtime engine on each architecture: a tree of contexts (one shared prefix, suffixes,
    branches below branches) packed into tree blocks where the graph takes the 4-D mask, every
    node a row where it does not (sliding windows: refused with the reason), and both equal to a
    full transformers forward of each context (restricted softmax within 1e-5)."""
    import torch
    from transformers import AutoModelForCausalLM

    from typed_decisions.artifacts import load_artifacts
    from typed_decisions.engine import Engine
    from typed_decisions.errors import EngineError

    out, manifest = tiny_exports[arch]
    sliding = manifest["architecture"]["sliding_window"] is not None
    art = load_artifacts(out)
    prefix = list(range(20, 40))  # longer than the window of 8
    tails = [[50], [50, 51], [50, 51, 52], [50, 53], [60, 61], [60, 62, 63, 64], [70]]
    contexts = [prefix + t for t in tails]
    allowed = [[5, 6, 7, 100, 200]] * len(contexts)
    engine = Engine(art, threads=THREADS, cache_bytes=0)
    assert engine.packed == (not sliding), engine.packed_reason
    got = engine.next_token_logits(contexts, allowed, cache_points=[len(prefix)])
    if sliding:
        assert "2-D" in engine.packed_reason and engine.stats.packed_rows == 0
        with pytest.raises(EngineError, match="packed=True: the graph's attention_mask is 2-D"):
            Engine(art, threads=THREADS, packed=True)
    else:
        assert engine.stats.packed_rows == 1 and engine.stats.runs == 1  # the whole tree in one block
    rows = Engine(art, threads=THREADS, cache_bytes=0, packed=False).next_token_logits(contexts, allowed)
    model = AutoModelForCausalLM.from_pretrained(tiny_folders[arch], dtype=torch.float32).eval()

    def soft(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    for ctx, a, g, r in zip(contexts, allowed, got, rows):
        with torch.no_grad():
            full = model(input_ids=torch.tensor([ctx])).logits[0, -1, a].double().numpy()
        np.testing.assert_allclose(soft(g), soft(r), atol=1e-5, rtol=0)
        np.testing.assert_allclose(soft(g), soft(full), atol=1e-5, rtol=0)
