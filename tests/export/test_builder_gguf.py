"""The graph builder reading GGUF files, and the builder's bounded self-check (prefix_check.py).

Oracles:
- the traced export of the same GGUF file (`builder="off"`: transformers de-quantizes it into a torch
  model, torch.onnx traces that): the builder's graph must equal it within 1e-5 of the row's scale
  (prefill, cached step, tree mask), and the Decider's answers from both directories within 1e-5.
  Files: the catalogue's `tiny` (SmolLM2-135M, llama arch: llama.cpp's q/k permutation, tied
  embeddings, Q4_1 + Q8_0), and tiny random Qwen2 (q/k/v biases, GQA, tied), Llama (untied, q/k
  permuted here as llama.cpp permutes them), Gemma 3 (6 layers: five sliding with window 8 and the
  local RoPE base, then a full one; norm weights stored as w + 1; one KV head) and Phi-3 (fused
  qkv and gate_up, untied) written by tiny_gguf.py in Q8_0, Q4_1, F16 and F32;
- transformers' own GGUF config (AutoConfig with gguf_file) for the metadata reading;
- transformers' loader for a separate `output.weight` (the tiny Qwen2 file untied by tiny_gguf.untie_gguf);
- transformers' LlamaTensorProcessor and llama.cpp's permute for the un-permutation.

Mutations (a swapped RoPE half, queries grouped onto the wrong KV heads, Qwen2's q/k/v biases left
out, Gemma's logit soft-cap left out of the manifest, a Gemma 3 GGUF's norm weights read without
undoing llama.cpp's + 1, a full-export weight that differs from the checked prefix) must each make
the bounded self-check fail.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import typed_decisions_export.export as export_module
from export_cache import STATES, Lazy, cached_export, traced_and_built
from td_invariance import request, vector
from test_builder import (
    TOL,
    _modulo_group,
    _modulo_ungroup,
    _swapped_rotate_half,
    compare_graphs,
)
from tiny_gguf import untie_gguf, write_gguf
from tiny_models import save_tiny_model
from typed_decisions_export import SelfCheckError, export_model
from typed_decisions_export.builder import BuilderError, WeightError, open_source
from typed_decisions_export.builder import gguf_weights
from typed_decisions_export.builder import ops as builder_ops
from typed_decisions_export.builder.gguf_weights import unpermute
from typed_decisions_export.builder_choice import choose_builder
from typed_decisions_export.prefix_check import prefix_layers, weights_differing

GGUF_ARCHES = ["qwen2", "llama", "gemma3", "phi3"]
# A GGUF carries no layer_types (transformers derives them: every 6th Gemma 3 layer is full), so the
# tiny Gemma 3 file has 6 layers, the last one full: its RoPE base is the file's, the others' the local one.
GGUF_OVERRIDES = {"gemma3": {"num_hidden_layers": 6, "layer_types": None}}


# what the tiny GGUFs are made from (GGUF_OVERRIDES is in this file): the cached GGUFs and traced
# oracles are remade when any of them changes (tests/export_cache.py)
TINY_RECIPE = (Path(__file__).with_name("tiny_models.py"), Path(__file__).with_name("tiny_gguf.py"), Path(__file__))


@pytest.fixture(scope="module")
def tiny_ggufs():
    """arch -> tiny GGUF file (spread norm weights and biases, vocabulary = the tokenizer's), cached
    on disk per recipe and library versions, so the traced exports made from it can be cached too."""

    def make(arch):
        def build(work):
            folder = save_tiny_model(arch, work / arch, spread_vectors=True, vocab_from_tokenizer=True,
                                     config_overrides=GGUF_OVERRIDES.get(arch))
            write_gguf(folder, work / f"{arch}.gguf")

        return cached_export(f"gguf-{arch}", build, marker=f"{arch}.gguf", inputs=TINY_RECIPE) / f"{arch}.gguf"

    return Lazy(make)


@pytest.fixture(scope="module")
def gguf_pairs(tiny_ggufs, tmp_path_factory):
    """arch -> {"traced": (dir, manifest), "builder": (dir, manifest)} exported from the same GGUF: the
    traced one, the oracle, cached on disk (tests/export_cache.py); the builder's made afresh."""
    root = tmp_path_factory.mktemp("gguf_pairs")

    def make(arch):
        return traced_and_built(f"gguf-oracle-{arch}", tiny_ggufs[arch], root / arch / "builder", builder="auto",
                                inputs=TINY_RECIPE)

    return Lazy(make)


@pytest.fixture(scope="module")
def smollm2_pair(smollm2_gguf, tmp_path_factory):
    """SmolLM2-135M GGUF: the traced export (cached on disk) and a builder export (this run)."""
    return traced_and_built("smollm2-135m-traced", smollm2_gguf, tmp_path_factory.mktemp("smollm2_builder") / "out",
                            builder="auto", name="smollm2-135m")


def _assert_same_export(pair):
    (bdir, bman), (tdir, tman) = pair["builder"], pair["traced"]
    assert bman["export"]["graph"] == "builder" and tman["export"]["graph"] == "traced"
    assert bman["self_check"]["passed"] and tman["self_check"]["passed"]
    assert bman["self_check"]["prefix"]["weights_differing"] == []
    errors = compare_graphs(bdir / "model.onnx", tdir / "model.onnx")
    print(f"\n{bdir.parent.name}: builder vs traced graph, max scale-aware error {errors} (TOL {TOL})")
    assert set(errors) == ({"prefill", "cached_step", "tree"} if bman["attention_mask"] == "4d"  # 2-D: sliding windows
                           else {"prefill", "cached_step", "left_padded"})
    assert max(errors.values()) <= TOL, errors
    for key in ("format_version", "architecture", "attention_mask", "lm_head", "tokenizer", "dtype", "opset", "source"):
        assert bman[key] == tman[key], key
    np.testing.assert_array_equal(np.load(bdir / "lm_head.npy"), np.load(tdir / "lm_head.npy"))
    assert (bdir / "chat_template.jinja").read_text() == (tdir / "chat_template.jinja").read_text()
    assert (bdir / "tokenizer.json").read_bytes() == (tdir / "tokenizer.json").read_bytes()


def _assert_same_answers(pair):
    from typed_decisions.decider import Decider

    built, traced = Decider.load(pair["builder"][0]), Decider.load(pair["traced"][0])
    requests = [request(s) for s in STATES]
    ref = np.stack([vector(r) for r in traced.run_many(requests, use_cache=False)])
    alone = np.stack([vector(built.run(r)) for r in requests])
    batched = np.stack([vector(r) for r in built.run_many(requests, use_cache=False)])
    print(f"Decider max |p_builder - p_traced|: alone {np.abs(alone - ref).max():.2e}, batched "
          f"{np.abs(batched - ref).max():.2e} (TOL {TOL})")
    assert np.abs(alone - ref).max() <= TOL and np.abs(batched - ref).max() <= TOL
    return ref


# --- builder from GGUF = traced from GGUF -------------------------------------------------------------
@pytest.mark.parametrize("arch", GGUF_ARCHES)
def test_tiny_gguf_builder_equals_traced(gguf_pairs, arch):
    _assert_same_export(gguf_pairs[arch])
    ref = _assert_same_answers(gguf_pairs[arch])
    assert np.abs(ref[:, :3] - 1 / 3).max() > 0.05  # not a vacuous match of flat answers


def test_smollm2_gguf_builder_equals_traced(smollm2_pair):
    _assert_same_export(smollm2_pair)
    _assert_same_answers(smollm2_pair)
    check = smollm2_pair["builder"][1]["self_check"]["prefix"]
    assert check["layers"] == 2 and check["of_layers"] == 30 and check["tokens"] < 200


# --- metadata and tensors against transformers ---------------------------------------------------------
FAMILY_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_parameters", "tie_word_embeddings",
               "vocab_size", "sliding_window", "use_sliding_window", "max_window_layers", "attention_bias",
               "mlp_bias", "max_position_embeddings", "layer_types",
               # Gemma 3 and Phi-3
               "query_pre_attn_scalar", "final_logit_softcapping", "attn_logit_softcapping",
               "use_bidirectional_attention", "hidden_activation", "partial_rotary_factor",
               "original_max_position_embeddings", "rope_scaling")


@pytest.mark.parametrize("which", ["qwen2", "llama", "gemma3", "phi3", "smollm2"])
def test_gguf_config_equals_transformers(tiny_ggufs, smollm2_gguf, which):
    from transformers import AutoConfig

    path = smollm2_gguf if which == "smollm2" else tiny_ggufs[which]
    ours = open_source("gguf", path).config
    ref = AutoConfig.from_pretrained(path.parent, gguf_file=path.name).to_dict()
    for key in FAMILY_KEYS:
        assert ours.get(key) == ref.get(key), key
    if which == "gemma3":  # the file's layout reached the config: a window, a full 6th layer, head_dim 32
        assert ours["model_type"] == "gemma3_text" and ours["sliding_window"] == 8 and ours["head_dim"] == 32
        assert ours["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]


def test_gguf_keys_transformers_does_not_read(tiny_ggufs):
    """llama.cpp writes a Gemma 3's final_logit_softcapping and a Phi-3's rope dimension count and
    window; transformers' GGUF loader reads none of them (its GGUF_CONFIG_MAPPING), so the traced
    path, and the builder with it, take the config class's defaults. If transformers starts reading
    one, test_gguf_config_equals_transformers fails until gguf_config.KEYS reads it too."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
    from typed_decisions_export.builder.gguf_config import KEYS
    from typed_decisions_export.builder.gguf_reader import field, open_reader

    gemma, phi = open_reader(tiny_ggufs["gemma3"]), open_reader(tiny_ggufs["phi3"])
    assert field(gemma, "gemma3.final_logit_softcapping") == 30.0
    assert open_source("gguf", tiny_ggufs["gemma3"]).config["final_logit_softcapping"] is None
    assert field(phi, "phi3.rope.dimension_count") == 16 and field(phi, "phi3.attention.sliding_window") == 0
    for arch in KEYS:  # KEYS holds exactly the keys transformers renames to a config attribute
        assert KEYS[arch] == {k: v for k, v in GGUF_CONFIG_MAPPING[arch].items() if v is not None}


def test_unpermute_inverts_llama_cpp_and_equals_transformers():
    from tiny_gguf import _permute
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    rng = np.random.default_rng(0)
    for heads, kv, name in ((4, 4, "blk.0.attn_q.weight"), (4, 2, "blk.0.attn_k.weight")):
        w = rng.standard_normal((kv * 16, 64)).astype(np.float32)
        permuted = _permute(w, kv)
        assert not np.array_equal(permuted, w)
        np.testing.assert_array_equal(unpermute(permuted, kv), w)
        ref = LlamaTensorProcessor(config={"num_attention_heads": heads, "num_key_value_heads": kv})
        np.testing.assert_array_equal(unpermute(permuted, kv), ref.process(permuted, name).weights)


# --- refusals --------------------------------------------------------------------------------------------
def test_truncated_gguf_names_the_tensor(tiny_ggufs, tmp_path):
    from gguf import GGUFReader

    data = tiny_ggufs["qwen2"].read_bytes()
    last = max(GGUFReader(tiny_ggufs["qwen2"]).tensors, key=lambda t: t.data_offset)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])
    with pytest.raises(WeightError, match=rf"'{last.name}'.*truncated"):
        open_source("gguf", cut)
    for flag in ("auto", "on"):  # the traced path could not read it either: no fallback
        with pytest.raises(WeightError, match=last.name):
            export_model(cut, tmp_path / f"out-{flag}", progress=False, builder=flag)
    (tmp_path / "junk.gguf").write_bytes(b"GGUF")
    with pytest.raises(WeightError, match="junk.gguf: not a readable GGUF file"):
        open_source("gguf", tmp_path / "junk.gguf")


def test_corrupt_gguf_tensor_is_named(tiny_ggufs, tmp_path):
    """An F16 weight whose bytes became NaN is refused by name when it is read."""
    from gguf import GGMLQuantizationType, GGUFReader

    t = next(t for t in GGUFReader(tiny_ggufs["qwen2"]).tensors if t.tensor_type == GGMLQuantizationType.F16)
    data = bytearray(tiny_ggufs["qwen2"].read_bytes())
    data[t.data_offset:t.data_offset + 2] = np.float16(np.nan).tobytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(WeightError, match=rf"'{t.name}'.*NaN"):
        export_model(bad, tmp_path / "out", progress=False, builder="on")


def test_unknown_gguf_architecture_falls_back(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    lines = []
    assert choose_builder("auto", "gguf", tmp_path / "m.gguf", log=lines.append) is None
    assert "'gpt2' GGUF" in lines[0] and "traced" in lines[0]
    with pytest.raises(BuilderError, match=r"'gpt2' GGUF.*--builder off"):
        choose_builder("on", "gguf", tmp_path / "m.gguf")


# --- the bounded self-check ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounded")
    return Lazy(lambda arch: save_tiny_model(arch, root / arch, spread_vectors=True))


def _mutate_spec(monkeypatch, mutate):
    real = export_module.choose_builder

    def patched(*args, **kwargs):
        spec, source = real(*args, **kwargs)
        return mutate(spec), source

    monkeypatch.setattr(export_module, "choose_builder", patched)


def _without_qkv_bias(spec):
    assert all(layer.q.bias and layer.k.bias and layer.v.bias for layer in spec.layers)
    return replace(spec, layers=tuple(replace(layer, q=replace(layer.q, bias=None), k=replace(layer.k, bias=None),
                                              v=replace(layer.v, bias=None)) for layer in spec.layers))


def _without_softcap(real):
    def architecture(*args, **kwargs):
        arch = real(*args, **kwargs)
        assert arch["final_logit_softcapping"] == 30.0
        return dict(arch, final_logit_softcapping=None)

    return architecture


@pytest.mark.parametrize("mutation", ["rope_half_swapped", "gqa_grouping", "qkv_bias_missing", "softcap_missing"])
@pytest.mark.parametrize("source", ["folder", "gguf"])
def test_bounded_self_check_fails_a_wrong_graph(folders, tiny_ggufs, tmp_path, monkeypatch, mutation, source):
    if source == "gguf" and mutation == "softcap_missing":
        pytest.skip("transformers reads no soft-cap from a Gemma 3 GGUF (test_gguf_keys_transformers_does_not_read)")
    arch = "gemma3" if mutation == "softcap_missing" else "qwen2"  # qwen2: GQA 4 on 2, q/k/v biases, RoPE
    src = tiny_ggufs[arch] if source == "gguf" else folders[arch]
    if mutation == "rope_half_swapped":
        monkeypatch.setattr(builder_ops, "rotate_half", _swapped_rotate_half)
    elif mutation == "gqa_grouping":
        monkeypatch.setattr(builder_ops, "group_queries", _modulo_group)
        monkeypatch.setattr(builder_ops, "ungroup_queries", _modulo_ungroup)
    elif mutation == "qkv_bias_missing":
        _mutate_spec(monkeypatch, _without_qkv_bias)
    else:
        monkeypatch.setattr(export_module, "architecture", _without_softcap(export_module.architecture))
    with pytest.raises(SelfCheckError, match="logits_rel" if mutation == "softcap_missing" else "hidden_rel"):
        export_model(src, tmp_path / "bad", progress=False, builder="on")
    assert not (tmp_path / "bad" / "manifest.json").exists()
    assert not list((tmp_path / "bad").glob(".selfcheck-*"))  # the scratch prefix is gone


def test_bounded_self_check_fails_gemma_norms_left_shifted(tiny_ggufs, tmp_path, monkeypatch):
    """A Gemma 3 GGUF's norm weights read as llama.cpp stores them (w + 1, not undone): the
    bounded self-check (its oracle: transformers' Gemma2TensorProcessor) must refuse the export."""
    monkeypatch.setattr(gguf_weights, "NORM_SHIFTED", ())
    with pytest.raises(SelfCheckError, match="hidden_rel"):
        export_model(tiny_ggufs["gemma3"], tmp_path / "bad", progress=False, builder="on")
    assert not (tmp_path / "bad" / "manifest.json").exists()


def test_prefix_covers_every_layer_kind(folders):
    from typed_decisions_export.builder import plan
    from typed_decisions_export.builder.families import gemma3

    assert prefix_layers(plan(folders["qwen2"])) == 2
    config = json.loads((folders["gemma3"] / "config.json").read_text())
    config = dict(config, num_hidden_layers=12, layer_types=None, sliding_window_pattern=6)
    spec = gemma3.spec(config)  # five sliding layers, then a full one: the prefix reaches the full one
    assert [layer.sliding_window for layer in spec.layers[:6]] == [8] * 5 + [None]
    assert prefix_layers(spec) == 6


def test_weights_check_sees_a_changed_full_export(gguf_pairs, tmp_path):
    """The prefix must be what ships: a full-export weight changed after writing is named."""
    import tempfile

    from typed_decisions_export.builder import _lm_head_name
    from typed_decisions_export.builder.decoder import write_backbone
    from typed_decisions_export.prefix_check import VocabSlice

    bdir = gguf_pairs["qwen2"]["builder"][0]
    full = tmp_path / "full"
    shutil.copytree(bdir, full)
    spec, source = choose_builder("on", "gguf", Path(gguf_pairs["qwen2"]["builder"][1]["source"]["path"]))
    ids = [0, 3, 7, 11]
    head = _lm_head_name(spec, source.tensors)
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        scratch = Path(scratch)
        tensors = VocabSlice(source.tensors, {spec.embed, head}, ids)
        write_backbone(replace(spec, vocab_size=len(ids)), tensors, scratch / "model.onnx", log=lambda m: None)
        np.save(scratch / "lm_head.npy", tensors.get(head))
        assert weights_differing(full, scratch, spec.embed, ids)[1] == []
        import onnx

        model = onnx.load(str(full / "model.onnx"), load_external_data=False)
        t = next(t for t in model.graph.initializer if t.name == "model.layers.1.mlp.down_proj.weight")
        offset = int({e.key: e.value for e in t.external_data}["offset"])
        with open(full / "model.onnx.data", "r+b") as f:
            f.seek(offset + 8)
            f.write(np.float32(1.5).tobytes())
        assert weights_differing(full, scratch, spec.embed, ids)[1] == ["model.layers.1.mlp.down_proj.weight"]


@pytest.fixture(scope="module")
def untied_gguf(tiny_ggufs, tmp_path_factory) -> tuple[Path, np.ndarray]:
    """The tiny Qwen2 GGUF (tied) with `output.weight` = -token_embd in F16 added: (file, that head)."""
    path = tmp_path_factory.mktemp("untied") / "qwen2-untied.gguf"
    return path, untie_gguf(tiny_ggufs["qwen2"], path)


def test_builder_reads_a_separate_output_weight(untied_gguf, tmp_path):
    """A GGUF with `output.weight` is untied: lm_head.npy is that tensor."""
    from typed_decisions_export.builder import spec_of, write_lm_head

    path, head = untied_gguf
    source = open_source("gguf", path)
    assert source.config["tie_word_embeddings"] is False
    write_lm_head(source, tmp_path / "lm_head.npy", spec=spec_of(source.config))
    np.testing.assert_array_equal(np.load(tmp_path / "lm_head.npy"), head.astype(np.float32))


def test_the_traced_loader_reads_a_separate_output_weight(untied_gguf):
    """The traced export's loader (transformers) unties it too: the LM head is that tensor, not the
    embedding, and the manifest's source hash is the file's."""
    from typed_decisions_export.loading import load_source
    from typed_decisions_export.manifest import lm_head_weight

    path, head = untied_gguf
    loaded = load_source(path, log=lambda m: None)
    assert loaded.model.config.tie_word_embeddings is False
    lm_head = lm_head_weight(loaded.model)  # (V, H)
    np.testing.assert_array_equal(lm_head, head.astype(np.float32))
    embed = loaded.model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(lm_head, -embed, atol=1e-3)  # f16 rounding of the negated embedding
    assert loaded.source["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
