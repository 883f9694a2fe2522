"""The graph builder (export/typed_decisions_export/builder) against the traced export, its oracle.

For every tiny architecture, the same Hugging Face folder (tiny_models.py, with every norm weight
and bias spread away from its init so that a skipped one shows) is exported twice: the traced
torch.onnx path (`builder="off"`) and the builder (`builder="on"`). Both directories pass the
exporter's own self-check against transformers; here the two graphs are compared directly, with the
same inputs, on hidden states and presents (within 1e-5 of the row's scale): a prefill, a cached
step on a shared past, and a tree mask (4-D graphs; the 2-D sliding-window graphs take a
left-padded batch instead), and the Decider's answers from both directories within 1e-5.

Mutation tests: a builder graph with the RoPE halves swapped, the query heads grouped onto the
wrong KV heads, or Qwen2's q/k/v biases left out must fail that same comparison.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from export_cache import STATES, Lazy, traced_and_built
from td_invariance import request, vector
from tiny_models import ARCHES, save_tiny_model
from typed_decisions_export import ExportError, export_model
from typed_decisions_export.builder import (
    UnsupportedArchitecture,
    WeightError,
    build_backbone,
    plan,
)
from typed_decisions_export.builder import ops as builder_ops
from typed_decisions_export.builder.weights import SafetensorsSource
from typed_decisions_export.builder_choice import choose_builder
from typed_decisions_export.ort_backbone import OrtBackbone

TOL = 1e-5
# what the tiny folders are made from (tiny_models.py, and spread_folders' arguments in conftest.py): a
# cached traced oracle is remade when they change (tests/export_cache.py)
TINY_RECIPE = (Path(__file__).with_name("tiny_models.py"), Path(__file__).with_name("conftest.py"))
@pytest.fixture(scope="module")
def pairs(spread_folders, tmp_path_factory):
    """arch -> {"traced": (dir, manifest), "builder": (dir, manifest)}, each passing its self-check.
    The traced export, the oracle (torch.onnx, most of this module's time), is cached on disk per
    exporter version, recipe of the tiny models and library versions (tests/export_cache.py); the
    builder's is made afresh every run."""
    root = tmp_path_factory.mktemp("builder_pairs")

    def make(arch):
        return traced_and_built(f"builder-oracle-{arch}", spread_folders[arch], root / arch / "builder",
                                name=f"tiny-{arch}", inputs=TINY_RECIPE)

    return Lazy(make)


# --- the comparison ---------------------------------------------------------------------------------
def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """max|a - b| / max(1, max|b|): the self-check's scale-aware error."""
    return float(np.max(np.abs(a.astype(np.float64) - b))) / max(1.0, float(np.max(np.abs(b))))


def _tree_feed(ort: OrtBackbone, past: list[np.ndarray], p: int):
    """5 new tokens after a past of p: parents [-1, 0, 0, 2, -1] (two branches below the first
    token, a fresh root), each seeing the whole past and its ancestors; positions p + depth."""
    parents, depth = [-1, 0, 0, 2, -1], [0, 1, 1, 2, 0]
    t = len(parents)
    mask = np.zeros((1, 1, t, p + t), bool)
    mask[..., :p] = True
    for i in range(t):
        j = i
        while j != -1:
            mask[0, 0, i, p + j] = True
            j = parents[j]
    ids = np.array([[41, 42, 43, 44, 45]])
    return ids, mask, np.array([[p + d for d in depth]]), past


def compare_graphs(built: Path, traced: Path) -> dict[str, float]:
    """Worst scale-aware error of the builder graph against the traced graph, per driving pattern
    (hidden states of real rows, and every present)."""
    a, b = OrtBackbone(built), OrtBackbone(traced)
    assert a.input_names == b.input_names and a.output_names == b.output_names
    assert a.mask_4d == b.mask_4d
    ids = list(range(10, 35))  # 25 tokens: longer than the sliding windows of 8
    errors = {}
    ha, pa = a.prefill(ids)
    hb, pb = b.prefill(ids)
    errors["prefill"] = max(_rel(ha, hb), *(_rel(x, y) for x, y in zip(pa, pb)))
    n, k = 20, 5
    _, past = b.prefill(ids[:n])  # the same past (the oracle's) into both graphs
    feed = (np.array([ids[n:]]), np.ones((1, n + k), np.int64), np.arange(n, n + k)[None], past)
    (ha, pa), (hb, pb) = a.run(*feed), b.run(*feed)
    errors["cached_step"] = max(_rel(ha, hb), *(_rel(x, y) for x, y in zip(pa, pb)))
    if b.mask_4d:  # a tree of new tokens in one row, through the 4-D mask as the engine lays it out
        ids_t, mask, pos, past_t = _tree_feed(b, past, n)
        outs = []
        for ort in (a, b):
            feed = {"input_ids": ids_t, "attention_mask": mask, "position_ids": pos}
            feed.update({name: t for name, t in zip(ort.input_names[3:], past_t)})
            outs.append(ort.session.run(ort.output_names, feed))
        errors["tree"] = max(_rel(x, y) for x, y in zip(*outs))
    else:  # left-padded batch: compare the real rows only (a padding row sees nothing)
        seqs = [ids, ids[5:], ids[12:]]
        width = len(ids)
        mask = np.zeros((3, width), np.int64)
        toks = np.zeros((3, width), np.int64)
        for r, s in enumerate(seqs):
            toks[r, width - len(s):], mask[r, width - len(s):] = s, 1
        pos = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
        (ha, _), (hb, _) = a.run(toks, mask, pos), b.run(toks, mask, pos)
        real = mask.astype(bool)
        errors["left_padded"] = _rel(ha[real], hb[real])
    return errors


# --- builder = traced, every tiny architecture --------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHES)
def test_builder_graph_equals_traced_graph(pairs, arch):
    (bdir, bman), (tdir, tman) = pairs[arch]["builder"], pairs[arch]["traced"]
    assert bman["self_check"]["passed"] and bman["export"]["graph"] == "builder"
    assert tman["export"]["graph"] == "traced"
    # the traced 4-D graphs lose one softmax NaN guard per layer (softmax_guard.py); the builder writes none
    four_d = tman["attention_mask"] == "4d"
    assert tman["graph_rewrites"]["softmax_nan_guards_dropped"] == (tman["architecture"]["num_layers"] if four_d else 0)
    assert bman["graph_rewrites"]["softmax_nan_guards_dropped"] == 0
    errors = compare_graphs(bdir / "model.onnx", tdir / "model.onnx")
    assert set(errors) == ({"prefill", "cached_step", "tree"} if bman["attention_mask"] == "4d"
                           else {"prefill", "cached_step", "left_padded"})
    assert max(errors.values()) <= TOL, errors
    # the same manifest facts and files, but for what says how it was made
    for key in ("format_version", "architecture", "attention_mask", "lm_head", "tokenizer", "dtype", "opset"):
        assert bman[key] == tman[key], key
    np.testing.assert_array_equal(np.load(bdir / "lm_head.npy"), np.load(tdir / "lm_head.npy"))
    assert set(bman["files"]) == set(tman["files"])


@pytest.mark.parametrize("arch", ARCHES)
def test_decider_answers_equal(pairs, arch):
    """Every probability of three requests (choice, noul, score), one at a time and batched."""
    from typed_decisions.decider import Decider

    built, traced = Decider.load(pairs[arch]["builder"][0]), Decider.load(pairs[arch]["traced"][0])
    requests = [request(s) for s in STATES]
    ref = np.stack([vector(r) for r in traced.run_many(requests, use_cache=False)])
    alone = np.stack([vector(built.run(r)) for r in requests])
    batched = np.stack([vector(r) for r in built.run_many(requests, use_cache=False)])
    assert np.abs(alone - ref).max() <= TOL and np.abs(batched - ref).max() <= TOL
    assert np.abs(ref[:, :3] - 1 / 3).max() > 0.05  # not a vacuous match of flat answers


@pytest.mark.parametrize("arch", ARCHES)
def test_mid_layer_outputs_equal_transformers_hidden_states(pairs, spread_folders, arch):
    """hidden_state.{k} (docs/FORMAT.md) is transformers' hidden_states[k] at every position: the
    residual stream after k layers (Gemma's scaled embeddings and sandwich norms, Phi-3's fused
    projections included); the traced graph has none."""
    import torch
    from transformers import AutoModelForCausalLM
    from typed_decisions_export.builder.decoder import hidden_layer_set

    (bdir, bman), (_, tman) = pairs[arch]["builder"], pairs[arch]["traced"]
    n = bman["architecture"]["num_layers"]
    assert bman["hidden_layers"] == hidden_layer_set(n) != [] and tman["hidden_layers"] == []
    ort = OrtBackbone(bdir / "model.onnx")
    names = [f"hidden_state.{k}" for k in bman["hidden_layers"]]
    assert [o.name for o in ort.session.get_outputs()][-len(names):] == names
    ids = list(range(10, 35))
    feed = {"input_ids": np.array([ids]), "attention_mask": ort.mask_feed(np.ones((1, len(ids)), np.int64), len(ids)),
            "position_ids": np.arange(len(ids))[None]}
    feed.update(zip(ort.input_names[3:], ort.empty_past(1)))
    got = ort.session.run(names, feed)
    model = AutoModelForCausalLM.from_pretrained(spread_folders[arch], dtype=torch.float32).eval()
    with torch.no_grad():
        hs = model.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    for k, g in zip(bman["hidden_layers"], got):
        assert _rel(g, hs[k].numpy()) <= TOL, k
        assert _rel(g, hs[k + 1].numpy()) > 1e-3, k  # k layers done, not k + 1


@pytest.mark.parametrize("arch", ["qwen2", "phi3"])
def test_int8_sees_the_same_down_proj(pairs, arch):
    """INT8 keeps each layer's down_proj float32, found by the module scope the dynamo exporter
    records; the builder writes the same scopes, so both graphs keep the same MatMuls."""
    from typed_decisions_export.int8.smoothquant import excluded_nodes

    _, built = excluded_nodes(pairs[arch]["builder"][0] / "model.onnx")
    _, traced = excluded_nodes(pairs[arch]["traced"][0] / "model.onnx")
    assert built == traced and len(built) == 2


# --- mutations the comparison must catch ------------------------------------------------------------
def _swapped_rotate_half(g, x, rotary_dim):
    half = rotary_dim // 2
    x1 = g.op("Slice", [x, g.const([0]), g.const([half]), g.const([-1])])
    x2 = g.op("Slice", [x, g.const([half]), g.const([rotary_dim]), g.const([-1])])
    return g.op("Concat", [x2, g.op("Neg", [x1])], axis=-1)  # (x2, -x1) instead of (-x2, x1)


def _modulo_group(g, q, num_kv_heads, n_rep, head_dim):  # head j reads KV head j % kv, not j // r
    return g.op("Transpose", [g.op("Reshape", [q, g.const([0, n_rep, num_kv_heads, -1, head_dim])])],
                perm=[0, 2, 1, 3, 4])


def _modulo_ungroup(g, x, num_heads, head_dim):
    return g.op("Reshape", [g.op("Transpose", [x], perm=[0, 2, 1, 3, 4]), g.const([0, num_heads, -1, head_dim])])


def _without_qkv_bias(spec):
    from dataclasses import replace

    layers = tuple(replace(layer, q=replace(layer.q, bias=None), k=replace(layer.k, bias=None),
                           v=replace(layer.v, bias=None)) for layer in spec.layers)
    return replace(spec, layers=layers)


@pytest.mark.parametrize("mutation", ["rope_half_swapped", "gqa_grouping", "qkv_bias_missing"])
def test_mutated_builder_graph_fails_the_comparison(pairs, spread_folders, tmp_path, monkeypatch, mutation):
    arch = "qwen2"  # GQA (4 heads on 2), q/k/v biases, RoPE
    traced = pairs[arch]["traced"][0] / "model.onnx"  # exported before anything is patched
    spec = plan(spread_folders[arch])
    if mutation == "rope_half_swapped":
        monkeypatch.setattr(builder_ops, "rotate_half", _swapped_rotate_half)
    elif mutation == "gqa_grouping":
        monkeypatch.setattr(builder_ops, "group_queries", _modulo_group)
        monkeypatch.setattr(builder_ops, "ungroup_queries", _modulo_ungroup)
    else:
        assert all(layer.q.bias and layer.k.bias and layer.v.bias for layer in spec.layers)
        spec = _without_qkv_bias(spec)
    build_backbone(spread_folders[arch], tmp_path / "model.onnx", spec=spec, log=lambda m: None)
    errors = compare_graphs(tmp_path / "model.onnx", traced)
    assert max(errors.values()) > 100 * TOL, errors


def test_mid_layers_are_checked_before_anything_is_written(spread_folders, tmp_path):
    """Layers named for a traced graph, or beyond the model's depth, are refused before any file."""
    with pytest.raises(ExportError, match="graph builder only"):
        export_model(spread_folders["qwen2"], tmp_path / "traced", progress=False, builder="off", hidden_layers="1")
    with pytest.raises(ExportError, match=r"hidden layers \[99\]: .* in \[0, \d+\)"):
        export_model(spread_folders["qwen2"], tmp_path / "deep", progress=False, builder="on", hidden_layers="1,99")
    assert not any((tmp_path / d / "model.onnx").exists() for d in ("traced", "deep"))


def test_builder_self_check_catches_a_wrong_graph(spread_folders, tmp_path, monkeypatch):
    """The export's own self-check (transformers) refuses a builder graph with the RoPE halves swapped."""
    from typed_decisions_export import SelfCheckError

    monkeypatch.setattr(builder_ops, "rotate_half", _swapped_rotate_half)
    with pytest.raises(SelfCheckError, match="hidden_rel"):
        export_model(spread_folders["qwen2"], tmp_path / "bad", progress=False, builder="on")
    assert not (tmp_path / "bad" / "manifest.json").exists()


# --- refusals ----------------------------------------------------------------------------------------
def test_unknown_architecture_names_the_fallback(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(UnsupportedArchitecture, match=r"'gpt2'.*--builder off"):
        plan(tmp_path)
    with pytest.raises(UnsupportedArchitecture, match="gpt2"):
        choose_builder("on", "hf_folder", tmp_path.resolve())
    (tmp_path / "model.safetensors").write_bytes(b"")
    lines = []
    assert choose_builder("auto", "hf_folder", tmp_path.resolve(), log=lines.append) is None
    assert "traced" in lines[0] and "gpt2" in lines[0]
    assert choose_builder("off", "hf_folder", tmp_path.resolve()) is None


def test_unreadable_gguf_and_unknown_choice_are_refused(tmp_path):
    """GGUF sources are the builder's too (test_builder_gguf.py); a file that is not one is named."""
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    with pytest.raises(WeightError, match="m.gguf: not a readable GGUF file"):
        export_model(fake, tmp_path / "out", builder="on", progress=False)
    with pytest.raises(ExportError, match="choose one of"):
        export_model(fake, tmp_path / "out", builder="maybe", progress=False)


def test_truncated_or_missing_tensor_is_named(spread_folders, tmp_path):
    import shutil

    folder = tmp_path / "cut"
    shutil.copytree(spread_folders["qwen2"], folder)
    weights = folder / "model.safetensors"
    header_len = struct.unpack("<Q", weights.read_bytes()[:8])[0]
    header = json.loads(weights.read_bytes()[8:8 + header_len])
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    data = weights.read_bytes()
    weights.write_bytes(data[:-16])
    with pytest.raises(WeightError, match=rf"{last}.*truncated"):
        SafetensorsSource(folder)
    weights.write_bytes(data)
    source = SafetensorsSource(folder)
    with pytest.raises(WeightError, match="'model.layers.9.mlp.up_proj.weight' is not in"):
        source.get("model.layers.9.mlp.up_proj.weight")
    with pytest.raises(WeightError, match=r"shape \[64\], the config implies \[32\]"):
        source.get("model.norm.weight", (32,))


def test_bf16_tensors_widen_exactly(tmp_path):
    """numpy has no bfloat16: the reader widens the stored halves; torch is the oracle."""
    import torch
    from safetensors.torch import save_file

    x = torch.randn(7, 5).to(torch.bfloat16)
    save_file({"w": x}, str(tmp_path / "model.safetensors"))
    np.testing.assert_array_equal(SafetensorsSource(tmp_path).get("w"), x.float().numpy())


def test_every_finite_bf16_value_widens_exactly_chunk_by_chunk(tmp_path, monkeypatch):
    """Every finite BF16 bit pattern (subnormals, -0, the largest) through a chunk size that splits the
    tensor unevenly: the chunked widening into the output is bit-exact, torch the oracle; F16 and F32
    take the same chunked path. A NaN in a later chunk is still refused."""
    import torch
    from safetensors.torch import save_file
    from typed_decisions_export.builder import weights

    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = bits[torch.isfinite(bits)].reshape(-1, 2)  # 65,280 values
    h = torch.randn(333, 7).to(torch.float16)
    f = torch.randn(101, 3)
    save_file({"w": x, "h": h, "f": f}, str(tmp_path / "model.safetensors"))
    monkeypatch.setattr(weights, "CHUNK_BYTES", 1000)  # 500 BF16 values a chunk: 131 chunks, the last short
    source = SafetensorsSource(tmp_path)
    got = source.get("w")
    assert got.dtype == np.float32 and got.shape == tuple(x.shape)
    np.testing.assert_array_equal(got.view(np.uint32), x.float().numpy().view(np.uint32))
    np.testing.assert_array_equal(source.get("h"), h.float().numpy())
    np.testing.assert_array_equal(source.get("f"), f.numpy())
    bad = x.clone()
    bad.view(-1)[-3] = float("nan")
    save_file({"w": bad}, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightError, match="NaN or infinite"):
        SafetensorsSource(tmp_path).get("w")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_row_blocks_and_rows_equal_the_whole_tensor(tmp_path, dtype):
    """The embedding and lm_head are read a block of rows at a time (or only the rows the self-check
    needs): the same values as the whole tensor, in order, every row once."""
    import torch
    from safetensors.torch import save_file

    x = torch.randn(1000, 24).to(getattr(torch, dtype))
    save_file({"e": x}, str(tmp_path / "model.safetensors"))
    source = SafetensorsSource(tmp_path)
    whole = source.get("e")
    blocks = list(source.row_blocks("e", (1000, 24), block_bytes=4 * 24 * 37))  # 37 rows a block
    assert [b.shape[0] for b in blocks] == [37] * 27 + [1]
    np.testing.assert_array_equal(np.concatenate(blocks), whole)
    ids = [999, 0, 5, 5, 512]
    np.testing.assert_array_equal(source.get_rows("e", ids), whole[ids])
    with pytest.raises(WeightError, match="asked for rows"):
        source.get_rows("e", [1000])
    with pytest.raises(WeightError, match="the config implies"):
        next(source.row_blocks("e", (24, 1000)))


def test_reading_a_bf16_tensor_holds_no_full_size_temporary(tmp_path, monkeypatch):
    """Issue #32: a BF16 tensor is widened into its float32 output chunk by chunk (the old reader held
    the raw uint16 copy and a uint32 copy beside the output: 2.5 x the output at its peak), and
    lm_head.npy is written a block of rows at a time (never the whole (V, H) array): numpy's
    allocations, traced."""
    import tracemalloc

    import torch
    from safetensors.torch import save_file
    from typed_decisions_export.builder import weights, write_lm_head

    rows, cols = 4096, 1024  # 16 MiB of float32
    x = torch.randn(rows, cols).to(torch.bfloat16)
    save_file({"lm_head.weight": x}, str(tmp_path / "model.safetensors"))
    source = SafetensorsSource(tmp_path)
    monkeypatch.setattr(weights, "CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(weights, "BLOCK_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        out = source.get("lm_head.weight")
        _, peak = tracemalloc.get_traced_memory()
        del out
        tracemalloc.reset_peak()

        class Spec:  # write_lm_head reads only these
            lm_head, embed, vocab_size, hidden_size = "lm_head.weight", "model.embed_tokens.weight", rows, cols

        assert write_lm_head(tmp_path, tmp_path / "lm_head.npy", spec=Spec) == (rows, cols)
        _, head_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full = 4 * rows * cols
    assert peak < full + 4 * (1 << 20), peak  # the output plus a chunk, not 2.5 x the output
    assert head_peak < full / 4, head_peak  # a block of rows (1 MiB here), never the whole head
    ref = tmp_path / "ref.npy"
    np.save(ref, x.float().numpy())
    assert (tmp_path / "lm_head.npy").read_bytes() == ref.read_bytes()  # np.save's own format, byte for byte


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("params", [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "default", "rope_theta": 100000.0},  # SmolLM2 (head_dim 64)
    {"rope_type": "default", "rope_theta": 1000000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 8.0},
    {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 3.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768},  # Qwen2.5's
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
     "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 2048,
     "attention_factor": 1.25, "truncate": False},
])
def test_rope_inverse_frequencies_match_transformers(params, head_dim):
    """Our inverse frequencies equal transformers' own rope init functions bit for bit: an ulp of
    inv_freq is an ulp of the angle at every position (numpy's float32 power, used before, was 1-2 ulp
    off in 5 of SmolLM2's 32 values, ~3e-6 of cos and sin at position 107)."""
    import transformers as tf
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from typed_decisions_export.builder.rope import inv_freq

    config = tf.LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                            max_position_embeddings=131072, rope_parameters=dict(params))
    if params["rope_type"] == "default":
        ref, _ = tf.models.llama.modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        ref, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu")
    ours = inv_freq(params, head_dim)
    np.testing.assert_array_equal(ours.inv_freq, ref.numpy())
    assert ours.attention_factor == (1.0 if params["rope_type"] == "default" else factor)


@pytest.mark.parametrize("arch", ARCHES)
def test_disk_estimate_matches_what_a_builder_export_writes(pairs, spread_folders, arch):
    """The disk check's estimate (builder/disk.py, from the spec alone) against the files the
    builder wrote: model.onnx.data + lm_head.npy within 5 % of it (before its margin)."""
    from typed_decisions_export.builder.disk import MARGIN, export_bytes

    directory, _ = pairs[arch]["builder"]
    written = (directory / "model.onnx.data").stat().st_size + (directory / "lm_head.npy").stat().st_size
    spec = plan(spread_folders[arch])
    estimate = export_bytes(spec) / MARGIN
    assert abs(written - estimate) / written < 0.05, (arch, written, estimate)
    assert export_bytes(spec, int8=True) > export_bytes(spec)


def test_too_little_disk_is_refused_before_anything_is_written(spread_folders, tmp_path, monkeypatch):
    from collections import namedtuple

    from typed_decisions_export.builder import disk

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 4096, 4096))
    out = tmp_path / "out"
    with pytest.raises(ExportError, match=r"writes about .* GB .* 0\.00 GB free: free some space"):
        export_model(spread_folders["llama"], out, builder="on", progress=False)
    assert not (out / "model.onnx.data").exists() and not (out / "lm_head.npy").exists()


def test_yarn_rope_graph_equals_traced_graph(tmp_path):
    """A Qwen2 with YaRN (scaled and blended inverse frequencies, cos and sin times its mscale):
    the builder's graph against the traced one, and the builder export's own self-check."""
    yarn = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 64}
    folder = save_tiny_model("qwen2", tmp_path / "src", spread_vectors=True, config_overrides={"rope_parameters": yarn})
    pair = traced_and_built("builder-oracle-qwen2-yarn", folder, tmp_path / "builder", name="tiny-yarn",
                            inputs=(*TINY_RECIPE, Path(__file__)))  # `yarn` is in this file
    traced, built = pair["traced"][0], pair["builder"][1]
    assert built["self_check"]["passed"] and built["export"]["graph"] == "builder"
    errors = compare_graphs(tmp_path / "builder" / "model.onnx", traced / "model.onnx")
    assert max(errors.values()) <= TOL, errors
    # not vacuous: without the yarn scaling the graph is another one
    plain = save_tiny_model("qwen2", tmp_path / "plain", spread_vectors=True)
    export_model(plain, tmp_path / "plain-out", progress=False, builder="on")
    assert max(compare_graphs(tmp_path / "plain-out" / "model.onnx", traced / "model.onnx").values()) > 1e-3
