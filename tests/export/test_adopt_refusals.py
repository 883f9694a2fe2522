"""Graphs the adopter must refuse (or fold), made by hand-breaking a REAL Optimum export.

Each test copies Optimum's export of the tiny Llama (tests/foreign_exports.py, cached), edits its
graph with `onnx`, and checks that `adopt_onnx` refuses it with a message naming what it found,
leaving no manifest.json (an unusable directory never looks finished). One edit is adoptable: a
logit scale and a soft-cap after the head are folded into the manifest, and the self-check (against
the edited graph's own logits) proves the fold right; a wrong head weight fails that self-check.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from foreign_exports import genai_export, optimum_export

from typed_decisions.decider import Decider
from typed_decisions_export import SelfCheckError
from typed_decisions_export.adopt import AdoptError, adopt_onnx
from typed_decisions_export.adopt import graph as adopt_graph


@pytest.fixture(scope="module")
def optimum_llama():
    return optimum_export("llama") / "onnx"


def broken(src, tmp_path, edit, name="model.onnx"):
    """A copy of the Optimum folder whose graph `edit(model)` changed (saved as `name`)."""
    folder = tmp_path / "src"
    shutil.copytree(src, folder)
    model = onnx.load(str(folder / "model.onnx"))
    edit(model)
    (folder / "model.onnx").unlink()
    onnx.save(model, str(folder / name))
    return folder


def refused(folder, tmp_path, match):
    out = tmp_path / "out"
    with pytest.raises(AdoptError, match=match) as info:
        adopt_onnx(folder, out, progress=False)
    assert not (out / "manifest.json").exists()
    return str(info.value)


def _head_node(model):
    return next(n for n in model.graph.node if n.output[0] == "logits")


def _drop_past(model):
    g = model.graph
    keep_in = [i for i in g.input if not i.name.startswith("past_key_values.")]
    keep_out = [o for o in g.output if not o.name.startswith("present.")]
    del g.input[:], g.output[:]
    g.input.extend(keep_in)
    g.output.extend(keep_out)


def test_no_past_inputs(optimum_llama, tmp_path):
    msg = refused(broken(optimum_llama, tmp_path, _drop_past), tmp_path, "no past_key_values")
    assert "input_ids, attention_mask, position_ids" in msg and "text-generation-with-past" in msg


def test_missing_position_ids_and_unknown_inputs(optimum_llama, tmp_path):
    def rename(model):
        for i in model.graph.input:
            if i.name == "position_ids":
                i.name = "cache_position"
        for node in model.graph.node:
            node.input[:] = ["cache_position" if x == "position_ids" else x for x in node.input]

    refused(broken(optimum_llama, tmp_path, rename), tmp_path, r"no position_ids input \(the graph derives positions")


def test_gemma3_whose_optimum_export_has_no_position_ids(tmp_path):
    """A real case: Optimum exports Gemma 3 without position_ids (positions from the mask)."""
    msg = refused(optimum_export("gemma3") / "onnx", tmp_path, "no position_ids input")
    assert "model_type 'gemma3_text'" in msg and "typed-decisions export" in msg


def test_bias_after_the_head(optimum_llama, tmp_path):
    def add_bias(model):
        head = _head_node(model)
        head.output[0] = "pre_bias"
        model.graph.initializer.append(numpy_helper.from_array(np.ones(512, np.float32), "lm_head.bias"))
        model.graph.node.append(helper.make_node("Add", ["pre_bias", "lm_head.bias"], ["logits"], name="bias_add"))

    msg = refused(broken(optimum_llama, tmp_path, add_bias), tmp_path, "could not locate the LM head")
    assert "Add 'bias_add'" in msg and "LM-head bias" in msg


def test_head_weight_that_is_not_an_initializer(optimum_llama, tmp_path):
    def weight_as_input(model):
        w = _head_node(model).input[1]
        init = next(i for i in model.graph.initializer if i.name == w)
        model.graph.input.append(helper.make_tensor_value_info(w, onnx.TensorProto.FLOAT, list(init.dims)))
        model.graph.initializer.remove(init)

    # The weight turned graph input is also an input the engine does not feed: refused before the head.
    refused(broken(optimum_llama, tmp_path, weight_as_input), tmp_path, r"input onnx::MatMul_\d+ that the engine does not feed")


def test_block_quantized_head(optimum_llama, tmp_path):
    def quantize(model):
        head = _head_node(model)
        head.op_type, head.domain = "MatMulNBits", "com.microsoft"

    refused(broken(optimum_llama, tmp_path, quantize), tmp_path, r"MatMulNBits .*block-quantized LM head")


def test_fused_attention_in_an_optimum_graph(optimum_llama, tmp_path):
    def fuse(model):
        node = helper.make_node("GroupQueryAttention", ["q", "k", "v"], ["gqa_out"], domain="com.microsoft",
                                name="/model/layers.0/attn/GroupQueryAttention", num_heads=4, kv_num_heads=2)
        model.graph.node.append(node)

    msg = refused(broken(optimum_llama, tmp_path, fuse), tmp_path, r"fused attention ops \(GroupQueryAttention x1")
    assert "attention_mask" in msg


def test_onnxruntime_genai_builder_output(tmp_path):
    """The real builder's fp32 CPU graph of the same tiny Llama: refused, saying what it would take."""
    genai = genai_export("llama")
    assert (genai / "genai_config.json").is_file()
    msg = refused(genai, tmp_path, "onnxruntime-genai builder output")
    assert "seqlens_k" in msg and "driver" in msg and "MatMulNBits" in msg
    # Without its genai_config.json (and with a config.json) the graph itself is refused: the
    # fused kernel is named, with how many there are.
    folder = tmp_path / "bare"
    shutil.copytree(genai, folder)
    (folder / "genai_config.json").unlink()
    shutil.copy(optimum_export("llama") / "hf" / "config.json", folder)
    refused(folder, tmp_path, r"fused attention ops \(GroupQueryAttention x2, com.microsoft\)")


def test_older_merged_layout(optimum_llama, tmp_path):
    refused(broken(optimum_llama, tmp_path, lambda m: None, name="decoder_model_merged.onnx"), tmp_path,
            "older Optimum layout")


def test_multimodal_config(optimum_llama, tmp_path):
    folder = broken(optimum_llama, tmp_path, lambda m: None)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llava", "text_config": {}}))
    refused(folder, tmp_path, "a multimodal model .llava")


def _scale_and_softcap(model):
    """logits = 30 * tanh((0.5 * x) / 30): Cohere-style scale, then Gemma-style soft-cap."""
    head = _head_node(model)
    head.output[0] = "raw_logits"
    g = model.graph
    for name, value in (("scale", 0.5), ("cap", 30.0)):
        g.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
    g.node.extend([
        helper.make_node("Mul", ["raw_logits", "scale"], ["scaled"], name="logit_scale"),
        helper.make_node("Div", ["scaled", "cap"], ["capped_in"], name="softcap_div"),
        helper.make_node("Tanh", ["capped_in"], ["capped"], name="softcap_tanh"),
        helper.make_node("Mul", ["cap", "capped"], ["logits"], name="softcap_mul"),
    ])


def test_scale_and_softcap_are_folded_into_the_manifest(optimum_llama, tmp_path):
    out = tmp_path / "out"
    manifest = adopt_onnx(broken(optimum_llama, tmp_path, _scale_and_softcap), out, progress=False)
    arch = manifest["architecture"]
    assert arch["logit_scale"] == 0.5 and arch["final_logit_softcapping"] == 30.0
    assert manifest["source"]["lm_head"]["tail"] == ["Mul", "Div", "Tanh", "Mul"]
    assert manifest["self_check"]["passed"]  # against the edited graph's own (capped) logits
    # The runtime applies the fold: the answers differ from the uncapped model's.
    plain = adopt_onnx(optimum_llama, tmp_path / "plain", progress=False)
    assert plain["architecture"]["final_logit_softcapping"] is None
    a = Decider.load(out).decide("Is a whale a fish?", {"q": {"type": "noul", "instructions": "Yes?"}})
    b = Decider.load(tmp_path / "plain").decide("Is a whale a fish?", {"q": {"type": "noul", "instructions": "Yes?"}})
    assert abs(a.answers["q"].noul - b.answers["q"].noul) > 1e-4


def test_external_data_is_read_and_hashed(optimum_llama, tmp_path):
    """Optimum writes `model.onnx_data` beside the graph for models over 2 GB: the head is read
    from it, and it is part of the source's hash."""
    folder = tmp_path / "src"
    shutil.copytree(optimum_llama, folder)
    model = onnx.load(str(folder / "model.onnx"))
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx_data",
              size_threshold=0)
    manifest = adopt_onnx(folder, tmp_path / "out", progress=False)
    plain = adopt_onnx(optimum_llama, tmp_path / "plain", progress=False)
    assert manifest["self_check"]["passed"]
    assert manifest["source"]["sha256"] != plain["source"]["sha256"]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "lm_head.npy"), np.load(tmp_path / "plain" / "lm_head.npy"))
    (folder / "model.onnx_data").write_bytes(b"")  # truncated: ONNX cannot read the weights
    with pytest.raises(AdoptError, match=r"onnx could not read the graph with its weights \(model.onnx_data\)"):
        adopt_onnx(folder, tmp_path / "again", progress=False)
    assert not (tmp_path / "again" / "manifest.json").exists()


def test_two_tanh_are_refused():
    with pytest.raises(AdoptError, match="more than one Tanh"):
        adopt_graph._fold_tail([("tanh", None), ("mul", 2.0), ("tanh", None)])


def test_a_wrong_head_fails_the_self_check(optimum_llama, tmp_path, monkeypatch):
    """The self-check can fail: a head read 0.1% off is caught, and no manifest is written."""
    real = adopt_graph.find_head

    def off(graph):
        head = real(graph)
        return adopt_graph.Head(**{**head.__dict__, "weight": head.weight * np.float32(1.001)})

    monkeypatch.setattr("typed_decisions_export.adopt.adopter.find_head", off)
    out = tmp_path / "out"
    with pytest.raises(SelfCheckError, match="head: logits_rel"):
        adopt_onnx(optimum_llama, out, progress=False)
    assert not (out / "manifest.json").exists() and (out / "self_check.failed.json").is_file()
