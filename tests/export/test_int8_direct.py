"""INT8 written by the graph builder straight from the source (int8/direct.py), against its oracle:
the builder's float32 export quantized file to file by quantize_export (int8/pipeline.py).

For every tiny family the two INT8 directories must hold the same graph, node for node, the same
initializers byte for byte, the same drift record, and give the same answers; the float32
reference computed a segment of layers at a time (int8/float_reference.py) must equal the whole
float32 graph's probe tables. The bounded self-check must catch integers that are not the checked
float weights quantized, and a refused drift must leave no INT8 files behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from export_cache import STATES, Lazy
from td_invariance import request, vector
from tiny_models import ARCHES
from typed_decisions_export import (
    QuantizationError,
    SelfCheckError,
    export_model,
    quantize_export,
)
from typed_decisions_export.builder import plan
from typed_decisions_export.int8 import direct_writer
from typed_decisions_export.int8 import pipeline as pipeline_mod
from typed_decisions_export.int8.direct import direct_refusal
from typed_decisions_export.int8.float_reference import probe_tables, segments
from typed_decisions_export.int8.options import Int8Options
from typed_decisions_export.int8.pipeline import probe_set
from typed_decisions_export.ort_backbone import OrtBackbone

INT8_FILES = ("model.int8.onnx", "model.int8.u8u8.onnx")


@pytest.fixture(scope="module")
def folders(spread_folders):
    """arch -> tiny HF folder with spread norm weights and biases (conftest.py)."""
    return spread_folders


@pytest.fixture(scope="module")
def exports(folders, tmp_path_factory):
    """arch -> {"direct": dir, "float": dir, "file": dir}: INT8 from the source, the builder's
    float32 export, and that export quantized by quantize_export (both INT8 forced: random weights)."""
    root = tmp_path_factory.mktemp("direct_exports")

    def make(arch):
        d = {k: root / arch / k for k in ("direct", "float", "file")}
        export_model(folders[arch], d["direct"], builder="on", quantize="int8", force=True, progress=False)
        export_model(folders[arch], d["float"], builder="on", progress=False)
        quantize_export(d["float"], d["file"], force=True, progress=False)
        return d

    return Lazy(make)


def _graph(path: Path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=True)
    nodes = [(n.op_type, list(n.input), list(n.output), sorted((a.name, str(a)) for a in n.attribute))
             for n in model.graph.node]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    imports = sorted((o.domain, o.version) for o in model.opset_import)
    return nodes, inits, imports


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


@pytest.mark.parametrize("arch", ARCHES)
def test_direct_int8_is_the_float_export_quantized(exports, arch):
    d = exports[arch]
    for name in INT8_FILES:
        nodes_a, inits_a, imports_a = _graph(d["direct"] / name)
        nodes_b, inits_b, imports_b = _graph(d["file"] / name)
        assert nodes_a == nodes_b, name
        assert imports_a == imports_b == [("", 21), ("com.microsoft", 1)]
        assert inits_a.keys() == inits_b.keys()
        differ = [k for k in inits_a if inits_a[k].dtype != inits_b[k].dtype or not np.array_equal(inits_a[k], inits_b[k])]
        assert differ == [], differ
    assert any(v.dtype == np.int8 and v.ndim == 2 for v in inits_a.values())  # it did quantize
    qa, qb = _manifest(d["direct"])["quantization"], _manifest(d["file"])["quantization"]
    for key in ("quantized", "excluded", "graphs", "integer_format", "activations", "row_independent", "smoothing"):
        assert qa[key] == qb[key], key
    # The float32 side: the segmented reference vs the whole float32 graph, through the same probes.
    assert abs(qa["drift"]["max_abs_prob"] - qb["drift"]["max_abs_prob"]) < 1e-6
    assert qa["drift"]["top1_flips"] == qb["drift"]["top1_flips"]
    np.testing.assert_allclose(qa["probabilities"]["float32"], qb["probabilities"]["float32"], atol=1e-4)
    assert qa["probabilities"]["int8"] == qb["probabilities"]["int8"]
    assert qa["load_check"]["probabilities"] == qb["load_check"]["probabilities"]
    assert qa["written_by"] == "builder" and qa["source_onnx_sha256"] is None and qa["speed"]["int8_vs_float32"] is None
    assert qb["source_onnx_sha256"] is not None and "written_by" not in qb
    # What ships: no float32 graph, every file hashed, the self-check on the prefix with the integers compared.
    m = _manifest(d["direct"])
    names = {p.name for p in d["direct"].iterdir() if p.name != "manifest.json"}
    assert set(m["files"]) == names and "model.onnx" not in names and m["onnx_file"] == "model.int8.onnx"
    assert not any(p.name.startswith(".") for p in d["direct"].iterdir())  # scratch folders removed
    check = m["self_check"]
    assert check["passed"] and check["prefix"]["weights_differing"] == []
    assert check["graph"].startswith("model.onnx (float32")


@pytest.mark.parametrize("arch", ["llama", "gemma3", "mistral", "phi3"])
def test_direct_int8_answers_as_the_file_int8(exports, arch):
    from typed_decisions.decider import Decider

    d = exports[arch]
    requests = [request(s) for s in STATES]
    direct, file = Decider.load(d["direct"]), Decider.load(d["file"])
    a = np.stack([vector(direct.run(r)) for r in requests])
    b = np.stack([vector(r) for r in file.run_many(requests, use_cache=False)])
    assert np.array_equal(a, b)
    assert np.abs(a[:, :3] - 1 / 3).max() > 0.05  # not a vacuous match of flat answers


@pytest.mark.parametrize("arch", ["qwen2", "gemma3", "mistral"])
def test_segmented_reference_equals_the_whole_float_graph(exports, folders, arch):
    """One layer a segment (budget 1 byte): the hidden state crosses a segment boundary, each
    segment takes its own layers' past, and the tables equal Probe's on the whole graph."""
    float_dir = exports[arch]["float"]
    m = _manifest(float_dir)
    spec = plan(folders[arch])
    assert segments(spec, budget=1) == [(i, i + 1) for i in range(spec.num_layers)] and spec.num_layers >= 2
    _, probe, prompts = probe_set(float_dir, m["tokenizer"], m["architecture"])
    from typed_decisions_export.builder.weights import SafetensorsSource

    tables = probe_tables(spec, SafetensorsSource(folders[arch]), probe, prompts, float_dir, budget=1,
                          log=lambda s: None)
    ort = OrtBackbone(float_dir / "model.onnx")
    whole = (probe.alone(ort, prompts), probe.batched(ort, prompts), probe.cached(ort, prompts))
    for got, want in zip(tables, whole):
        assert got.shape == want.shape == (len(prompts), len(probe.cands))
        assert np.abs(got - want).max() < 1e-5
    assert np.abs(whole[0] - 1 / len(probe.cands)).max() > 0.01  # the probes are not flat


def test_segments_cover_the_layers_within_the_budget(folders):
    from typed_decisions_export.builder.disk import layer_weights

    spec = plan(folders["qwen2"])
    layer = 4 * sum(layer_weights(spec, spec.layers[0]))
    assert segments(spec, budget=layer) == [(0, 1), (1, 2)]
    assert segments(spec, budget=2 * layer) == [(0, 2)]
    assert segments(spec) == [(0, spec.num_layers)]


def test_self_check_catches_integers_that_are_not_the_weights(folders, tmp_path, monkeypatch):
    """Integers off by one level in one weight: the prefix check's comparison names that weight."""
    real = direct_writer.quantized_weight

    def off_by_one(name, w, levels, add_array):
        if name == "model.layers.1.self_attn.v_proj.weight":
            w = w.copy()
            w[0, 0] += np.abs(w[:, 0]).max() / levels  # one level more in one cell
        return real(name, w, levels, add_array)

    monkeypatch.setattr(direct_writer, "quantized_weight", off_by_one)
    out = tmp_path / "bad"
    with pytest.raises(SelfCheckError, match=r"v_proj\.weight \(int8\)"):
        export_model(folders["llama"], out, builder="on", quantize="int8", force=True, progress=False)
    assert not (out / "manifest.json").exists()


def test_drift_above_threshold_leaves_no_int8_files(folders, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline_mod, "THRESHOLD", {"max_abs_prob": -1.0, "decisive_flips": 0})
    out = tmp_path / "refused"
    with pytest.raises(QuantizationError, match="no usable export .* export without INT8"):
        export_model(folders["qwen2"], out, builder="on", quantize="int8", progress=False)
    assert not (out / "manifest.json").exists()
    assert not any((out / n).exists() for n in (*INT8_FILES, "model.int8.onnx.data", "model.onnx"))


def test_smoothing_takes_the_float_export(folders, tmp_path):
    """SmoothQuant calibrates on the float32 graph: the builder writes float32, then quantize_export."""
    options = Int8Options(smooth=0.5)
    assert "float32" in direct_refusal(options) and direct_refusal(Int8Options()) is None
    out = tmp_path / "smooth"
    m = export_model(folders["qwen2"], out, builder="on", quantize="int8", int8=options, force=True, progress=False)
    q = m["quantization"]
    assert q["smoothing"] is not None and q["source_onnx_sha256"] is not None and "written_by" not in q


def test_direct_disk_estimate_covers_what_it_writes(exports, folders):
    from typed_decisions_export.builder.disk import MARGIN, export_bytes, layer_weights
    from typed_decisions_export.int8.float_reference import SEGMENT_BYTES

    d, spec = exports["llama"]["direct"], plan(folders["llama"])
    written = sum((d / n).stat().st_size for n in ("model.int8.onnx.data", "lm_head.npy"))
    layer = 4 * max(sum(layer_weights(spec, x)) for x in spec.layers)  # the reference's scratch: a layer at least
    files = export_bytes(spec, int8=True, direct=True) / MARGIN - layer
    assert abs(written - files) / written < 0.05, (written, files)
    scratch = export_bytes(spec, int8=True, direct=True, segment_bytes=SEGMENT_BYTES) / MARGIN - files
    assert abs(scratch - SEGMENT_BYTES) < 1e-6 * SEGMENT_BYTES
