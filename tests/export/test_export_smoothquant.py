"""SmoothQuant for the MLP down_proj (int8/smoothquant.py, int8/matmul_rewrite.py): the smoothing
vector, the wiring it needs, that folding it into the up_proj / down_proj weights leaves the
float32 graph's results unchanged, and what the manifest records.

A hand-built gated MLP graph (h -> gate, up -> act(gate) * up -> down) checks the mechanics in
milliseconds; the tiny REAL model (SmolLM2-135M, with activation outliers in the thousands) checks
the float32 folding where it matters; tiny random models check quantize_export and the CLI.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from typed_decisions_export import ExportError, Int8Options, quantize_export
from typed_decisions_export.cli import main
from typed_decisions_export.int8.external_data import scale_weight
from typed_decisions_export.int8.integer import EXACT_EVERYWHERE_FORMAT
from typed_decisions_export.int8.matmul_rewrite import quantize_matmuls
from typed_decisions_export.int8.smoothquant import CALIBRATION, plan_smoothing, smoothing_pairs, smoothing_vector
from td_studies import int8_variants

HIDDEN, INTER = 8, 16


# --- a hand-built gated MLP ------------------------------------------------------------------------
def _scoped(node, *scopes: str):
    """Attach the dynamo exporter's name-scope metadata (what smoothquant._module() reads) to a node."""
    entry = node.metadata_props.add()
    entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(["", "base", "base.layers.0", "base.layers.0.mlp", *scopes])
    return node


def _mlp_graph(path, *, up_read_elsewhere: bool = False, product_of_gate_only: bool = False) -> dict[str, np.ndarray]:
    """y = (silu(h @ Wg) * (h @ Wu)) @ Wd, one layer, exporter-style names and scopes; returns the
    weights. Variants break the pattern SmoothQuant folding needs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = {
        "w_gate": rng.normal(size=(HIDDEN, INTER)).astype(np.float32),  # (K, N) like every ONNX MatMul weight
        "w_up": rng.normal(size=(HIDDEN, INTER)).astype(np.float32),
        "w_down": rng.normal(size=(INTER, HIDDEN)).astype(np.float32),
    }
    w["w_up"][:, 3] *= 300.0  # an outlier channel of the down_proj input, as real models have
    nodes = [
        _scoped(helper.make_node("MatMul", ["h", "w_gate"], ["g"], "node_gate"), "base.layers.0.mlp.gate_proj", "linear_4"),
        _scoped(helper.make_node("Sigmoid", ["g"], ["sg"], "node_sig"), "base.layers.0.mlp.act_fn", "silu"),
        _scoped(helper.make_node("Mul", ["g", "sg"], ["a"], "node_silu"), "base.layers.0.mlp.act_fn", "silu"),
        _scoped(helper.make_node("MatMul", ["h", "w_up"], ["u"], "node_up"), "base.layers.0.mlp.up_proj", "linear_5"),
        _scoped(helper.make_node("Mul", ["a", "g" if product_of_gate_only else "u"], ["x"], "node_mul"), "mul_1"),
        _scoped(helper.make_node("MatMul", ["x", "w_down"], ["y"], "node_down"), "base.layers.0.mlp.down_proj", "linear_6"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, HIDDEN])]
    if up_read_elsewhere:
        nodes.append(helper.make_node("Relu", ["u"], ["u_relu"], "node_relu"))
        outputs.append(helper.make_tensor_value_info("u_relu", TensorProto.FLOAT, [None, None, INTER]))
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [None, None, HIDDEN])], outputs,
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return w


def _run(path, h: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"h": h})[0]


def test_smoothing_vector_formula_by_hand():
    act = np.array([16.0, 1.0, 0.0, 9.0, 1e12, 1e-12])
    w = np.array([1.0, 4.0, 2.0, 0.0, 1.0, 1e12])
    # alpha 0.5: sqrt(act) / sqrt(w); zero maxima give 1; the last two hit the clip [1e-5, 1e5].
    np.testing.assert_allclose(smoothing_vector(act, w, 0.5), [4.0, 0.5, 1.0, 1.0, 1e5, 1e-5])
    # alpha 1: s = max|x| (all the difficulty moves to the weights); alpha 0: s = 1 / max|W|.
    np.testing.assert_allclose(smoothing_vector(act[:2], w[:2], 1.0), [16.0, 1.0])
    np.testing.assert_allclose(smoothing_vector(act[:2], w[:2], 0.0), [1.0, 0.25])
    # alpha 0.75: 16^0.75 / 1^0.25 = 8, 1 / 4^0.25 = 1/sqrt(2)
    np.testing.assert_allclose(smoothing_vector(act[:2], w[:2], 0.75), [8.0, 2**-0.5])
    with pytest.raises(ValueError, match="alpha"):
        smoothing_vector(act, w, 1.5)


def test_scale_weight_rows_and_columns():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)  # (K, N)
    np.testing.assert_array_equal(scale_weight(w, rows=np.array([2.0, 10.0])), [[0, 2, 4], [30, 40, 50]])
    np.testing.assert_array_equal(scale_weight(w, cols=np.array([1.0, 0.5, 0.0])), [[0, 0.5, 0], [3, 2, 0]])
    with pytest.raises(ValueError, match="row scale"):
        scale_weight(w, rows=np.ones(3))


def test_pairs_found_on_a_gated_mlp(tmp_path):
    _mlp_graph(tmp_path / "m.onnx")
    pairs, unmatched = smoothing_pairs(tmp_path / "m.onnx")
    assert unmatched == {}
    assert pairs == [{
        "down_module": "layers.0.mlp.down_proj", "up_module": "layers.0.mlp.up_proj", "down_node": "node_down",
        "up_node": "node_up", "down_weight": "w_down", "up_weight": "w_up", "x": "x",
    }]


@pytest.mark.parametrize(("variant", "reason"), [
    ("up_read_elsewhere", "read only by the product"),  # scaling up's columns would change the Relu too
    ("product_of_gate_only", "no single layers.0.mlp.up_proj MatMul"),  # x does not come from up_proj
])
def test_pairs_refused_when_the_folding_would_not_be_exact(tmp_path, variant, reason):
    _mlp_graph(tmp_path / "m.onnx", **{variant: True})
    pairs, unmatched = smoothing_pairs(tmp_path / "m.onnx")
    assert pairs == []
    assert reason in unmatched["layers.0.mlp.down_proj"]


def test_folding_is_exact_in_float_on_the_hand_built_mlp(tmp_path):
    """x / s through up_proj's columns, diag(s) W through down_proj's rows: the float32 graph
    computes the same y, while the smoothed weights really differ (s is far from 1)."""
    w = _mlp_graph(tmp_path / "m.onnx")
    h = np.random.default_rng(1).normal(size=(2, 5, HIDDEN)).astype(np.float32)
    x = (h @ w["w_gate"]) / (1 + np.exp(-(h @ w["w_gate"]))) * (h @ w["w_up"])  # (B, T, INTER)
    s = smoothing_vector(np.abs(x).reshape(-1, INTER).max(0), np.abs(w["w_down"]).max(1), 0.5)
    assert s.max() / s.min() > 10  # the outlier channel gets a large s
    no_matmul = {"node_gate", "node_up", "node_down"}  # nothing quantized: float32 folding only
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "s.onnx", exclude=no_matmul,
                     scale_rows={"w_down": s}, scale_cols={"w_up": 1.0 / s}, log=lambda m: None)
    ref, out = _run(tmp_path / "m.onnx", h), _run(tmp_path / "s.onnx", h)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # Negative control: scaling only one side is not a no-op (the check above can fail).
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "half.onnx", exclude=no_matmul, scale_rows={"w_down": s}, log=lambda m: None)
    assert np.abs(_run(tmp_path / "half.onnx", h) - ref).max() > 0.1 * np.abs(ref).max()


def _emulate_per_token(x: np.ndarray, w: np.ndarray, weight_levels: int = 63) -> np.ndarray:
    """The per-token INT8 MatMul in numpy, exact integer product: 127 levels per token,
    `weight_levels` per column."""
    from typed_decisions_export.int8.integer import quantize_weight_per_column

    sx = np.abs(x).max(-1, keepdims=True) / 127.0  # (B, T, 1)
    wq, sw = quantize_weight_per_column(w, weight_levels)  # (K, N) int8, (N,)
    return (np.rint(x / sx).astype(np.int64) @ wq.astype(np.int64)).astype(np.float64) * sw * sx


def test_per_token_activation_quantization_matches_numpy(tmp_path):
    """per_token: one symmetric scale per token (max |x| / 127), stored as uint8 around 128; ONNX
    Runtime's result equals a numpy emulation with an exact integer product, and no row depends on
    the others (per-tensor scales would make it depend on its batch-mates)."""
    w = _mlp_graph(tmp_path / "m.onnx")
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "r.onnx", exclude={"node_gate", "node_up"},
                     fmt=EXACT_EVERYWHERE_FORMAT, log=lambda m: None)  # one u8*s8 graph, exact on any CPU
    h = np.random.default_rng(2).normal(size=(2, 5, HIDDEN)).astype(np.float32)
    h[1, 0] *= 50.0  # one loud token: with per-tensor scales every other row would get coarser
    g = h @ w["w_gate"]
    with np.errstate(over="ignore"):  # exp(-g) overflows to inf for very negative g: silu -> 0
        x = g / (1 + np.exp(-g)) * (h @ w["w_up"])  # (B, T, INTER), the down_proj input
    expected = _emulate_per_token(x, w["w_down"])
    out = _run(tmp_path / "r.onnx", h)
    scale = np.abs(expected).max()
    assert np.abs(out - expected).max() <= 1e-5 * scale
    alone = np.concatenate([_run(tmp_path / "r.onnx", h[i : i + 1]) for i in range(2)])
    np.testing.assert_array_equal(alone, out)
    # It is a real quantization: close to float32, not equal to it.
    ref = _run(tmp_path / "m.onnx", h)
    assert 0 < np.abs(out - ref).max() <= 0.05 * np.abs(ref).max()


def _unfused(src, dst) -> int:
    """The per-token graph with each MatMulIntegerToFloat spelled out as MatMulInteger, Cast,
    Mul(sw), Mul(sx): the four ops the fused kernel replaces (the oracle of the next test)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(src))
    nodes, count = [], 0
    for n in model.graph.node:
        if n.op_type != "MatMulIntegerToFloat":
            nodes.append(n)
            continue
        xq, wq, sx, sw, zx, zw = n.input
        t = n.name
        nodes += [helper.make_node("MatMulInteger", [xq, wq, zx, zw], [f"{t}_i32"], f"{t}_mmi"),
                  helper.make_node("Cast", [f"{t}_i32"], [f"{t}_f"], f"{t}_cast", to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"{t}_f", sw], [f"{t}_cols"], f"{t}_cols"),
                  helper.make_node("Mul", [f"{t}_cols", sx], [n.output[0]], f"{t}_rows")]
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(dst))
    return count


@pytest.mark.parametrize("rows", [(1, 1), (1, 7), (3, 5)])
def test_fused_kernel_gives_the_unfused_numbers_to_the_bit(tmp_path, rows):
    """Each per-token MatMul is one MatMulIntegerToFloat (column scales in the GEMM's output stage,
    then the (..., 1) row scales): bit for bit what MatMulInteger, Cast, Mul(sw), Mul(sx) give, for a
    single token (a (1, 1, 1) row scale must not be taken for a scalar), one row and a batch — in
    both graphs an export writes (u8*s8, and the u8*u8 twin CPUs without VNNI run)."""
    import onnx

    from typed_decisions_export.int8.integer import IntegerFormat
    from typed_decisions_export.int8.u8u8 import write_u8u8_graph

    _mlp_graph(tmp_path / "m.onnx")
    assert quantize_matmuls(tmp_path / "m.onnx", tmp_path / "q.onnx", exclude=set(), fmt=IntegerFormat(127, 127),
                            log=lambda m: None) == 3
    ops = [n.op_type for n in onnx.load(str(tmp_path / "q.onnx"), load_external_data=False).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 3 and "MatMulInteger" not in ops and ops.count("QuantizeLinear") == 2  # h and x
    assert _unfused(tmp_path / "q.onnx", tmp_path / "u.onnx") == 3
    assert write_u8u8_graph(tmp_path / "q.onnx", tmp_path / "q.u8u8.onnx") == 3
    assert write_u8u8_graph(tmp_path / "u.onnx", tmp_path / "u.u8u8.onnx") == 3
    h = np.random.default_rng(7).normal(size=(*rows, HIDDEN)).astype(np.float32)
    h[..., 0, 1] *= 40.0
    from td_int8 import graph_this_cpu_runs

    # the graphs this class runs: u8*s8 where that kernel is exact, else the twins written above
    fused, unfused = _run(graph_this_cpu_runs(tmp_path / "q.onnx"), h), _run(graph_this_cpu_runs(tmp_path / "u.onnx"), h)
    np.testing.assert_array_equal(fused, unfused)
    np.testing.assert_array_equal(_run(tmp_path / "q.u8u8.onnx", h), _run(tmp_path / "u.u8u8.onnx", h))
    np.testing.assert_array_equal(_run(tmp_path / "q.u8u8.onnx", h), fused)  # both graphs, the same integers


@pytest.mark.parametrize("rows", [(1, 1), (1, 7), (3, 5)])
@pytest.mark.parametrize("variant", ["one_level", "two_level", "float_channels"])
def test_blocked_quantize_linear_gives_the_four_op_integers_to_the_bit(tmp_path, rows, variant):
    """The per-token integers from one blocked QuantizeLinear (opset 21; the graph's opset raised
    from the source's 18) are those of Div, Round, Add, Cast (blocked_quantize=False, opset 18
    kept), to the bit: one level, two levels (whose remainder comes from DequantizeLinear instead
    of Mul of the Round) and with float32 channels, in the u8*s8 graph and its u8*u8 twin. Row 0
    holds exact halves (127 sets the scale to ~1): both round them half to even."""
    import onnx

    from typed_decisions_export.int8.integer import IntegerFormat
    from typed_decisions_export.int8.u8u8 import write_u8u8_graph

    _mlp_graph(tmp_path / "m.onnx")
    kwargs = {"one_level": {}, "two_level": {"two_level": {"x"}},
              "float_channels": {"float_channels": {"x": np.array([3]), "h": np.array([0, 5])}}}[variant]
    fmt = IntegerFormat(127, 127)
    for name, blocked in (("new", True), ("old", False)):  # export/studies: float32 channels, the four ops forced
        int8_variants().quantize_matmuls_study(tmp_path / "m.onnx", tmp_path / f"{name}.onnx", exclude=set(), fmt=fmt,
                                               blocked_quantize=blocked, log=lambda m: None, **kwargs)
        write_u8u8_graph(tmp_path / f"{name}.onnx", tmp_path / f"{name}.u8u8.onnx")
    new, old = (onnx.load(str(tmp_path / f"{n}.onnx"), load_external_data=False) for n in ("new", "old"))
    version = {n: next(o.version for o in m.opset_import if o.domain == "") for n, m in (("new", new), ("old", old))}
    assert version == {"new": 21, "old": 18} and new.ir_version >= 10
    ops = {n: [node.op_type for node in m.graph.node] for n, m in (("new", new), ("old", old))}
    levels = 2 if variant == "two_level" else 1
    assert ops["new"].count("QuantizeLinear") == 1 + levels and "Round" not in ops["new"] and "Cast" not in ops["new"]
    assert ops["old"].count("Round") == 1 + levels and "QuantizeLinear" not in ops["old"]
    assert ops["new"].count("DequantizeLinear") == levels - 1
    h = np.random.default_rng(11).normal(size=(*rows, HIDDEN)).astype(np.float32)
    h[..., 0, 1] *= 40.0
    h[0, 0] = [127.0, 2.5, 3.5, -0.5, 0.5, 1.5, -2.5, 4.5]
    from td_int8 import graph_this_cpu_runs

    for graph in ("{}.onnx", "{}.u8u8.onnx"):  # the first: u8*s8 where that kernel is exact, else the twin
        np.testing.assert_array_equal(_run(graph_this_cpu_runs(tmp_path / graph.format("new")), h),
                                      _run(graph_this_cpu_runs(tmp_path / graph.format("old")), h))


def test_opset_is_raised_to_21_only_where_no_node_changes_meaning(tmp_path):
    """Graphs below opset 18 (Reduce* axes and Split's outputs were attributes) and graphs holding
    an op whose meaning changed by 21 (GroupNormalization) keep their opset and get the four-op
    quantization — the same numbers as the blocked form; an opset-18 graph is raised to 21. 7-bit
    weights (exact on every CPU class): an opset-17 graph has no u8*u8 twin (BitwiseXor is 18)."""
    import onnx
    from onnx import helper

    _mlp_graph(tmp_path / "m.onnx")
    m17 = onnx.load(str(tmp_path / "m.onnx"))
    m17.opset_import[0].version = 17
    onnx.save(m17, str(tmp_path / "m17.onnx"))
    gn = onnx.load(str(tmp_path / "m.onnx"))
    gn.graph.node.append(helper.make_node("GroupNormalization", ["h", "gn_s", "gn_b"], ["gn_y"], "node_gn", num_groups=2))
    onnx.save(gn, str(tmp_path / "gn.onnx"))
    opsets = {}
    for name in ("m", "m17", "gn"):
        quantize_matmuls(tmp_path / f"{name}.onnx", tmp_path / f"q_{name}.onnx", exclude=set(), fmt=EXACT_EVERYWHERE_FORMAT,
                         log=lambda m: None)
        q = onnx.load(str(tmp_path / f"q_{name}.onnx"), load_external_data=False)
        opsets[name] = (next(o.version for o in q.opset_import if o.domain == ""),
                        "QuantizeLinear" in {n.op_type for n in q.graph.node})
    assert opsets == {"m": (21, True), "m17": (17, False), "gn": (18, False)}
    h = np.random.default_rng(4).normal(size=(2, 3, HIDDEN)).astype(np.float32)
    np.testing.assert_array_equal(_run(tmp_path / "q_m17.onnx", h), _run(tmp_path / "q_m.onnx", h))


def test_two_level_activations_match_numpy_and_keep_the_small_channels(tmp_path):
    """two_level: down_proj's input as s1 q1 + s2 q2 (q2 quantizes x - s1 q1, its own per-token
    scale), two integer GEMMs added. Oracles: a numpy emulation with exact integer products, and
    the float product with the same 8-bit weights, which two levels approach far closer than one
    when a channel is 300x the others (channel 3 of _mlp_graph); row independence kept."""
    from td_int8 import graph_this_cpu_runs
    from typed_decisions_export.int8.integer import IntegerFormat, quantize_weight_per_column
    from typed_decisions_export.int8.u8u8 import write_u8u8_graph

    w = _mlp_graph(tmp_path / "m.onnx")
    fmt = IntegerFormat(127, 127)
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "one.onnx", exclude={"node_gate", "node_up"}, fmt=fmt, log=lambda m: None)
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "two.onnx", exclude={"node_gate", "node_up"}, fmt=fmt,
                     two_level={"x"}, log=lambda m: None)
    h = np.random.default_rng(5).normal(size=(2, 6, HIDDEN)).astype(np.float32)
    g = h @ w["w_gate"]
    with np.errstate(over="ignore"):
        x = (g / (1 + np.exp(-g)) * (h @ w["w_up"])).astype(np.float32)  # (B, T, INTER)
    wq, sw = quantize_weight_per_column(w["w_down"], 127)
    s1 = np.abs(x).max(-1, keepdims=True) / np.float32(127)
    q1 = np.rint(x / s1)
    r = x - q1 * s1  # float32, as the graph computes it
    s2 = np.abs(r).max(-1, keepdims=True) / np.float32(127)
    q2 = np.rint(r / s2)
    expected = sum((q.astype(np.int64) @ wq.astype(np.int64)).astype(np.float64) * sw * s for q, s in ((q1, s1), (q2, s2)))
    two_here = graph_this_cpu_runs(tmp_path / "two.onnx")  # u8*u8 where the u8*s8 kernel saturates
    two = _run(two_here, h)
    assert np.abs(two - expected).max() <= 1e-5 * np.abs(expected).max()
    same_weights = x.astype(np.float64) @ (wq.astype(np.float64) * sw)  # what only the activations' levels change
    err_one = np.abs(_run(graph_this_cpu_runs(tmp_path / "one.onnx"), h) - same_weights).max()
    err_two = np.abs(two - same_weights).max()
    assert err_two < 0.05 * err_one
    alone = np.concatenate([_run(two_here, h[i : i + 1]) for i in range(2)])
    np.testing.assert_array_equal(alone, two)
    assert write_u8u8_graph(tmp_path / "two.onnx", tmp_path / "twin.onnx") == 1  # two GEMMs, one weight
    np.testing.assert_allclose(_run(tmp_path / "twin.onnx", h), expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_down_levels_needs_a_quantized_down_proj():
    assert Int8Options(smooth=0.5, down_levels=2).down_levels == 2
    with pytest.raises(ExportError, match="down_levels=2 applies to quantized down_proj"):
        Int8Options(down_levels=2)  # down_proj float32: nothing to quantize in two levels
    with pytest.raises(ExportError, match="expected 1 or 2"):
        Int8Options(smooth=0.5, down_levels=3)


def test_float32_channels_are_taken_out_of_the_integers(tmp_path):
    """float_channels (a study, export/studies/int8_variants.py): the listed channels of down_proj's
    input are multiplied in float32 by their weight rows; the rest is quantized per token without
    them (their rows are zero in the integer weight, so they set neither a token's scale nor a
    column's). Oracle: numpy, exact integers."""
    w = _mlp_graph(tmp_path / "m.onnx")
    channels = np.array([3, 7])  # 3 is the hand-made outlier channel
    int8_variants().quantize_matmuls_study(tmp_path / "m.onnx", tmp_path / "f.onnx", exclude={"node_gate", "node_up"},
                                           fmt=EXACT_EVERYWHERE_FORMAT, float_channels={"x": channels}, log=lambda m: None)
    h = np.random.default_rng(2).normal(size=(2, 5, HIDDEN)).astype(np.float32)
    g = h @ w["w_gate"]
    with np.errstate(over="ignore"):
        x = (g / (1 + np.exp(-g)) * (h @ w["w_up"])).astype(np.float64)
    x_int, w_int = x.copy(), w["w_down"].copy()
    x_int[..., channels], w_int[channels, :] = 0.0, 0.0
    expected = _emulate_per_token(x_int, w_int) + x[..., channels] @ w["w_down"][channels, :].astype(np.float64)
    out = _run(tmp_path / "f.onnx", h)
    assert np.abs(out - expected).max() <= 1e-5 * np.abs(expected).max()
    # Taking the outlier channel out makes the result closer to float32 than plain per-token INT8.
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "r.onnx", exclude={"node_gate", "node_up"},
                     fmt=EXACT_EVERYWHERE_FORMAT, log=lambda m: None)
    ref = _run(tmp_path / "m.onnx", h)
    assert np.abs(out - ref).max() < 0.5 * np.abs(_run(tmp_path / "r.onnx", h) - ref).max()
    alone = np.concatenate([_run(tmp_path / "f.onnx", h[i : i + 1]) for i in range(2)])
    np.testing.assert_array_equal(alone, out)  # still row-independent


@pytest.mark.int8_u8s8("the negative control against itself: per-tensor scales have no u8*u8 twin")
def test_per_tensor_activations_depend_on_batch_mates(tmp_path):
    """The documented negative: quantize_dynamic's per-tensor pattern gives a row a different result
    next to a loud row than alone, which per_token (above) never does."""
    _mlp_graph(tmp_path / "m.onnx")
    int8_variants().quantize_matmuls_study(tmp_path / "m.onnx", tmp_path / "t.onnx", exclude=set(), activations="per_tensor",
                                           log=lambda m: None)
    h = np.random.default_rng(2).normal(size=(2, 5, HIDDEN)).astype(np.float32)
    h[1, 0] *= 50.0
    together = _run(tmp_path / "t.onnx", h)
    alone = _run(tmp_path / "t.onnx", h[:1])
    assert np.abs(together[:1] - alone).max() > 1e-3 * np.abs(alone).max()


def _extreme_graph(tmp_path, fmt) -> tuple[np.ndarray, np.ndarray]:
    """A MatMul whose weights are +-max in every column, quantized with `fmt`, written to
    q.onnx; returns (h, w) with every activation at +-127 once quantized (stored 1 or 255)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, n = 64, 8
    w = np.where(np.arange(k * n).reshape(k, n) % 3 == 0, -1.0, 1.0).astype(np.float32)  # |w| = max in every column
    graph = helper.make_graph([helper.make_node("MatMul", ["h", "w"], ["y"], "mm")], "g",
                              [helper.make_tensor_value_info("h", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "e.onnx"))
    quantize_matmuls(tmp_path / "e.onnx", tmp_path / "q.onnx", exclude=set(), fmt=fmt, log=lambda m: None)
    h = np.ones((3, k), np.float32)
    h[1] = -1.0
    h[2, ::2] = -1.0
    return h, w


def _run_matmul(path, h: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"h": h})[0]


def test_per_token_graph_is_exact_at_the_integer_extremes(tmp_path):
    """Every activation at +-127 and every weight at +-63 (the largest pair sums the 7-bit format
    allows): ONNX Runtime's u8*s8 MatMulInteger gives the exact integer product on every CPU class
    (without VNNI, 8-bit weights would saturate here; benchmarks/studies/int8_kernels.py)."""
    h, w = _extreme_graph(tmp_path, EXACT_EVERYWHERE_FORMAT)
    np.testing.assert_allclose(_run_matmul(tmp_path / "q.onnx", h), h.astype(np.float64) @ w, rtol=0, atol=1e-4)


def test_8_bit_weights_at_the_integer_extremes_are_exact_in_the_graph_this_cpu_runs(tmp_path):
    """8-bit weights at +-127 with every activation at +-127: the graph the runtime picks for this
    class (u8*s8 on VNNI/AMX, the u8*u8 twin elsewhere) gives the exact product, and so does the
    u8*u8 twin on every class."""
    from td_int8 import graph_this_cpu_runs
    from typed_decisions_export.int8.integer import IntegerFormat
    from typed_decisions_export.int8.u8u8 import write_u8u8_graph

    h, w = _extreme_graph(tmp_path, IntegerFormat(127, 127))
    exact = h.astype(np.float64) @ w
    np.testing.assert_allclose(_run_matmul(graph_this_cpu_runs(tmp_path / "q.onnx"), h), exact, rtol=0, atol=1e-4)
    assert write_u8u8_graph(tmp_path / "q.onnx", tmp_path / "twin.onnx") == 1
    np.testing.assert_allclose(_run_matmul(tmp_path / "twin.onnx", h), exact, rtol=0, atol=1e-4)


@pytest.mark.int8_u8s8("checks the u8*s8 kernel itself; skipped where it is not exact")
def test_u8s8_kernel_with_8_bit_weights_is_exact_on_vnni_and_amx(tmp_path):
    """The claim graph_file rests on: VNNI/AMX accumulate u8*s8 products in int32, so the u8*s8
    graph of 8-bit weights is exact there (on AVX2 it is off by far more than 1,
    benchmarks/studies/int8_kernels.py; under qemu-x86_64 -cpu EPYC-Rome too)."""
    from td_int8 import exact_here
    from typed_decisions.cpu import cpu_class
    from typed_decisions_export.int8.integer import IntegerFormat

    if not exact_here():
        pytest.skip(f"the u8*s8 kernel with 8-bit weights is not exact on class {cpu_class()} (no VNNI/AMX)")
    h, w = _extreme_graph(tmp_path, IntegerFormat(127, 127))
    np.testing.assert_allclose(_run_matmul(tmp_path / "q.onnx", h), h.astype(np.float64) @ w, rtol=0, atol=1e-4)


def test_u8u8_graph_computes_the_same_integers(tmp_path):
    """write_u8u8_graph: W + 128 with zero point 128 in place of W (int8), folded by ONNX Runtime at
    session start: the same output as a numpy oracle of the u8*s8 graph (exact integer product),
    with the weights stored once (the graph file has no tensor data of its own)."""
    import onnx

    from typed_decisions_export.int8.integer import IntegerFormat, quantize_weight_per_column
    from typed_decisions_export.int8.u8u8 import write_u8u8_graph

    w = _mlp_graph(tmp_path / "m.onnx")
    quantize_matmuls(tmp_path / "m.onnx", tmp_path / "q.onnx", exclude={"node_gate", "node_up"},
                     fmt=IntegerFormat(127, 127), log=lambda m: None)
    assert write_u8u8_graph(tmp_path / "q.onnx", tmp_path / "q.u8u8.onnx") == 1
    h = np.random.default_rng(4).normal(size=(2, 5, HIDDEN)).astype(np.float32)
    g = h @ w["w_gate"]
    with np.errstate(over="ignore"):
        x = g / (1 + np.exp(-g)) * (h @ w["w_up"])
    sx = np.abs(x).max(-1, keepdims=True) / 127.0
    wq, sw = quantize_weight_per_column(w["w_down"], 127)
    expected = (np.rint(x / sx).astype(np.int64) @ wq.astype(np.int64)).astype(np.float64) * sw * sx
    out = _run(tmp_path / "q.u8u8.onnx", h)
    assert np.abs(out - expected).max() <= 1e-5 * np.abs(expected).max()
    graph = onnx.load(str(tmp_path / "q.u8u8.onnx"), load_external_data=False).graph
    assert {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2} == {"w_down_quantized"}
    stored = next(t for t in graph.initializer if t.name == "w_down_quantized")  # read from q.onnx's data, not copied
    assert stored.data_location == onnx.TensorProto.EXTERNAL
    assert {e.key: e.value for e in stored.external_data}["location"] == "q.onnx.data"
    with pytest.raises(ValueError, match="no MatMulInteger"):
        write_u8u8_graph(tmp_path / "m.onnx", tmp_path / "m.u8u8.onnx")


def test_quantize_matmuls_rejects_a_scale_for_an_unknown_weight(tmp_path):
    _mlp_graph(tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="cannot rescale 'nope'"):
        quantize_matmuls(tmp_path / "m.onnx", tmp_path / "q.onnx", exclude=set(), scale_rows={"nope": np.ones(2)})


# --- the tiny real model ---------------------------------------------------------------------------
def test_folding_is_exact_in_float_on_smollm2(smollm2_export, tmp_path):
    """On SmolLM2 (down_proj inputs up to ~3000 in layers 11 and 28), the smoothed graph with float32
    weights gives the original hidden states within 1e-5 (relative to their scale); calibration
    leaves the export directory as it was (its temporary graph is removed)."""
    import onnx

    from typed_decisions_export.ort_backbone import OrtBackbone

    src, _ = smollm2_export
    before = sorted(p.name for p in src.iterdir())
    ids = [1, 9690, 198, 2683, 359, 253, 5356, 2, 198, 1, 4093, 198, 59, 2, 198, 1, 520, 9531, 198]
    plan = plan_smoothing(src / "model.onnx", 0.5, [ids, ids[:9]], 0, log=lambda m: None)
    record, rows, cols, float_nodes = plan.record, plan.scale_rows, plan.scale_cols, plan.float_nodes
    assert sorted(p.name for p in src.iterdir()) == before
    assert len(record["smoothed"]) == len(rows) == len(cols) == 30 and float_nodes == [] and record["not_matched"] == {}
    assert max(record["activation_absmax"].values()) > 1000  # the outliers smoothing is for
    s_all = np.concatenate(list(rows.values()))
    assert s_all.max() / s_all.min() > 10
    for name in rows:  # up columns get exactly the reciprocal of the matching down rows
        assert any(np.allclose(c * rows[name], 1.0) for c in cols.values() if c.shape == rows[name].shape)
    graph = onnx.load(str(src / "model.onnx"), load_external_data=False).graph
    # what --down-levels 2 quantizes in two levels: the inputs of the MatMuls whose rows are smoothed
    assert sorted(plan.smoothed_inputs) == sorted(n.input[0] for n in graph.node if n.op_type == "MatMul" and n.input[1] in rows)
    every_matmul = {n.name for n in graph.node if n.op_type == "MatMul"}
    quantize_matmuls(src / "model.onnx", tmp_path / "smoothed.onnx", exclude=every_matmul,
                     scale_rows=rows, scale_cols=cols, log=lambda m: None)
    ref, _ = OrtBackbone(src / "model.onnx").prefill(ids)  # (1, T, H)
    out, _ = OrtBackbone(tmp_path / "smoothed.onnx").prefill(ids)
    assert np.abs(out - ref).max() / max(1.0, np.abs(ref).max()) <= 1e-5
    # Negative control: without the up_proj side the hidden states move by O(their scale).
    quantize_matmuls(src / "model.onnx", tmp_path / "half.onnx", exclude=every_matmul, scale_rows=rows, log=lambda m: None)
    half, _ = OrtBackbone(tmp_path / "half.onnx").prefill(ids)
    assert np.abs(half - ref).max() / max(1.0, np.abs(ref).max()) > 1e-2


def test_norm_folding_is_exact_in_float_on_smollm2(smollm2_export, tmp_path):
    """Smoothing the q/k/v and gate/up inputs (1/s folded into the RMSNorm weights, s into the
    readers' weight rows) leaves the float32 graph's hidden states unchanged; dropping the norm
    side does not (the check can fail)."""
    import onnx

    from typed_decisions_export.ort_backbone import OrtBackbone
    from typed_decisions_export.int8.smoothquant import norm_sites

    src, _ = smollm2_export
    sites = norm_sites(src / "model.onnx")
    assert [t["module"] for t in sites[:2]] == ["layers.0.input_layernorm", "layers.0.post_attention_layernorm"]
    assert len(sites) == 60 and [len(t["weights"]) for t in sites[:2]] == [3, 2]
    ids = [1, 9690, 198, 2683, 359, 253, 5356, 2, 198, 1, 4093, 198, 59, 2, 198, 1, 520, 9531, 198]
    plan = plan_smoothing(src / "model.onnx", 0.5, [ids], 0, log=lambda m: None, norms=True)
    record, rows, cols = plan.record, plan.scale_rows, plan.scale_cols
    assert record["norms"] == [t["module"] for t in sites]
    gammas = {t["gamma"] for t in sites}
    for t in sites:  # each reader's rows get s, the norm weight 1/s
        for w in t["weights"]:
            np.testing.assert_allclose(rows[w] * rows[t["gamma"]], 1.0, rtol=1e-12)
    graph = onnx.load(str(src / "model.onnx"), load_external_data=False).graph
    every_matmul = {n.name for n in graph.node if n.op_type == "MatMul"}
    quantize_matmuls(src / "model.onnx", tmp_path / "s.onnx", exclude=every_matmul, scale_rows=rows, scale_cols=cols,
                     log=lambda m: None)
    ref, _ = OrtBackbone(src / "model.onnx").prefill(ids)
    out, _ = OrtBackbone(tmp_path / "s.onnx").prefill(ids)
    assert np.abs(out - ref).max() / max(1.0, np.abs(ref).max()) <= 1e-5
    no_norms = {k: v for k, v in rows.items() if k not in gammas}
    quantize_matmuls(src / "model.onnx", tmp_path / "half.onnx", exclude=every_matmul, scale_rows=no_norms, scale_cols=cols,
                     log=lambda m: None)
    half, _ = OrtBackbone(tmp_path / "half.onnx").prefill(ids)
    assert np.abs(half - ref).max() / max(1.0, np.abs(ref).max()) > 1e-2


# --- quantize_export and the CLI on tiny random models ---------------------------------------------
def test_down_levels_2_quantizes_only_the_smoothed_down_proj_in_two_levels(tiny_exports, tmp_path):
    """quantize_export(down_levels=2, keep_float=1): the smoothed down_proj runs two integer GEMMs
    on the same weight, the kept one stays a float32 MatMul, every other MatMul one GEMM; the
    manifest says so."""
    import onnx

    src, _ = tiny_exports["llama"]
    manifest = quantize_export(src, tmp_path / "sq2", Int8Options(smooth=0.5, keep_float=1, down_levels=2), force=True,
                               progress=False)
    q = manifest["quantization"]
    assert q["down_levels"] == 2 and len(q["smoothing"]["smoothed"]) == 1
    model = onnx.load(str(tmp_path / "sq2" / "model.int8.onnx"), load_external_data=False)
    assert manifest["opset"] == 21 == next(o.version for o in model.opset_import if o.domain == "")  # blocked QuantizeLinear
    graph = model.graph
    gemms: dict[str, int] = {}
    for n in graph.node:
        if n.op_type == "MatMulIntegerToFloat":
            gemms[n.input[1]] = gemms.get(n.input[1], 0) + 1
    assert sorted(gemms.values()).count(2) == 1 and set(gemms.values()) == {1, 2}
    float_matmuls = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in {t.name for t in graph.initializer}]
    assert len(float_matmuls) == 1  # the kept down_proj


@pytest.mark.int8_u8s8("per-tensor quantize_export: its drift probe runs the u8*s8 graph (no u8*u8 twin for per-tensor scales)")
def test_manifest_records_the_smoothing(tiny_exports, tmp_path):
    src, _ = tiny_exports["llama"]
    before = sorted(p.name for p in src.iterdir())
    manifest = quantize_export(src, tmp_path / "sq", Int8Options(smooth=0.5, keep_float=1), force=True, progress=False)
    assert sorted(p.name for p in src.iterdir()) == before  # no calibration graph left behind
    q = manifest["quantization"]
    sm = q["smoothing"]
    assert sm["method"] == "smoothquant" and sm["alpha"] == 0.5
    assert (sm["target"], sm["folded_into"]) == ("down_proj", "up_proj")
    assert sm["calibration"]["prompts"] == len(CALIBRATION) and sm["calibration"]["tokens"] > 0
    layers = {"layers.0.mlp.down_proj", "layers.1.mlp.down_proj"}
    assert set(sm["activation_absmax"]) == layers and sm["not_matched"] == {}
    # keep_float=1: the layer with the larger calibration maximum stays float32 and unsmoothed.
    worst = max(sm["activation_absmax"], key=sm["activation_absmax"].get)
    assert sm["kept_float_largest_absmax"] == [worst] and q["excluded"] == [worst]
    assert sm["smoothed"] == sorted(layers - {worst})
    assert q["quantized"] == 2 * 7 - 1  # q, k, v, o, gate, up, down per layer, one down kept
    assert sm["activations"] == q["activations"] == "per_token" and q["row_independent"] is True
    # Every quantized MatMul input is quantized per token once: per layer the attention input
    # (q, k, v), o_proj's, the MLP input (gate, up) and down_proj's, less the float32 down_proj.
    import onnx

    graph = onnx.load(str(tmp_path / "sq" / "model.int8.onnx"), load_external_data=False).graph
    assert sum(n.op_type == "ReduceMax" for n in graph.node) == 2 * 4 - 1
    per_tensor = int8_variants().quantize_export_per_tensor(src, tmp_path / "sq-tensor", Int8Options(smooth=0.5), force=True,
                                                            progress=False)["quantization"]
    assert per_tensor["smoothing"]["activations"] == "per_tensor" and per_tensor["excluded"] == []
    assert per_tensor["row_independent"] is False and per_tensor["integer_format"]["exact_without_vnni"] is False
    graph = onnx.load(str(tmp_path / "sq-tensor" / "model.int8.onnx"), load_external_data=False).graph
    assert not any(n.op_type == "ReduceMax" for n in graph.node)
    assert json.loads((tmp_path / "sq" / "manifest.json").read_text())["quantization"]["smoothing"] == sm


def test_without_smoothing_the_manifest_says_so(tiny_exports, tmp_path):
    src, _ = tiny_exports["llama"]
    q = quantize_export(src, tmp_path / "plain", Int8Options(smooth=None), force=True, progress=False)["quantization"]
    assert q["smoothing"] is None and q["excluded"] == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    with pytest.raises(ExportError, match="alpha"):
        Int8Options(smooth=1.5)
    with pytest.raises(ExportError, match="only apply with smoothing"):
        Int8Options(smooth=None, keep_float=2)
    with pytest.raises(TypeError, match="activations"):  # per-tensor scales: export/studies only
        Int8Options(activations="per_tensor")


def test_fused_gate_up_keeps_down_proj_float32_and_says_why(tiny_folders, tiny_exports, tmp_path):
    """Phi3 computes gate and up in one MatMul (gate_up_proj) and splits it: no up_proj MatMul to
    fold 1/s into, so its down_proj stays float32 and the manifest names the reason. That is the
    traced graph; the builder reads gate_up_proj as two row blocks (two MatMuls), so its down_proj
    is smoothed like any other family's."""
    from typed_decisions_export import export_model

    traced = tmp_path / "phi3-traced"
    assert export_model(tiny_folders["phi3"], traced, name="tiny-phi3", progress=False,
                        builder="off")["export"]["graph"] == "traced"
    q = quantize_export(traced, tmp_path / "phi3", Int8Options(smooth=0.5), force=True, progress=False)["quantization"]
    sm = q["smoothing"]
    assert sm["smoothed"] == [] and set(sm["not_matched"]) == {"layers.0.mlp.down_proj", "layers.1.mlp.down_proj"}
    assert all("up_proj" in why for why in sm["not_matched"].values())
    assert q["excluded"] == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    built, manifest = tiny_exports["phi3"]
    assert manifest["export"]["graph"] == "builder"  # the fixture's export (--builder auto)
    q = quantize_export(built, tmp_path / "phi3-built", Int8Options(smooth=0.5), force=True, progress=False)["quantization"]
    assert q["smoothing"]["smoothed"] == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]


def test_cli_smooth(tiny_folders, tmp_path, capsys):
    out = tmp_path / "cli-sq"
    rc = main([str(tiny_folders["qwen2"]), "--out", str(out), "--quantize", "int8", "--smooth", "0.6", "--force", "--quiet"])
    assert rc == 0
    sm = json.loads((out / "manifest.json").read_text())["quantization"]["smoothing"]
    assert sm["alpha"] == 0.6 and sm["smoothed"] == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    assert sm["activations"] == "per_token"
    out2 = tmp_path / "cli-sq-keep"
    assert main([str(tiny_folders["qwen2"]), "--out", str(out2), "--quantize", "int8", "--smooth", "0.5", "--keep-float", "1",
                 "--force", "--quiet"]) == 0
    q = json.loads((out2 / "manifest.json").read_text())["quantization"]
    assert q["smoothing"]["activations"] == "per_token" and len(q["excluded"]) == 1
    capsys.readouterr()
    # Per-tensor activations are a negative control (Int8Options), not a command-line choice.
    for bad in (["--smooth", "2"], ["--smooth", "half"], ["--activations", "tensor"]):
        with pytest.raises(SystemExit) as e:
            main([str(tiny_folders["qwen2"]), "--out", str(tmp_path / "x"), "--quantize", "int8", *bad])
        assert e.value.code == 2
    # --smooth without INT8 is refused before anything is exported.
    assert main([str(tiny_folders["qwen2"]), "--out", str(tmp_path / "y"), "--smooth", "0.5", "--quiet"]) == 1
    assert "INT8 only" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    assert main([str(tiny_folders["qwen2"]), "--out", str(tmp_path / "z"), "--quantize", "int8", "--smooth", "off",
                 "--keep-float", "2", "--quiet"]) == 1
    assert "only apply with smoothing" in capsys.readouterr().err


def test_cli_int8_flags_become_options():
    from typed_decisions_export.cli import build_parser, int8_options

    def parse(*flags):
        return int8_options(build_parser().parse_args(["m.gguf", "--out", "o", "--quantize", "int8", *flags]))

    assert parse() is None  # the defaults
    assert parse("--smooth", "0.5", "--down-levels", "2") == Int8Options(smooth=0.5, down_levels=2)
    assert parse("--smooth", "off", "--weight-bits", "7") == Int8Options(smooth=None, weight_bits=7)
