"""The adopter's graph rewrite (typed_decisions_export/adopt/graph.py) on hand-built graphs, torch-free.

Each graph ends the way a decoder's does, `x (N, H) -> LM head -> [scale, soft-cap] -> logits`,
in one of the spellings the adopter accepts. Oracle: ONNX Runtime on the UNCUT graph; the cut
graph's `last_hidden_state` times `lm_head`, with the folded scale and soft-cap, must give the
same logits. (Real Optimum graphs are adopted in tests/export/test_adopt_*.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # the export distribution's dependency; setup.sh installs it
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from typed_decisions_export.adopt import AdoptError  # noqa: E402
from typed_decisions_export.adopt.graph import cut_head, find_head  # noqa: E402

V, H = 11, 6
RNG = np.random.default_rng(0)
E = RNG.normal(size=(V, H)).astype(np.float32)  # (V, H), the "embedding" / head rows


def _model(nodes, inits):
    graph = helper.make_graph(
        nodes, "decoder-tail",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", H])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", V])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32)))


VARIANTS = {
    # untied: MatMul by an (H, V) initializer, Identity after it
    "matmul": (lambda: _model([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Identity", ["y"], ["logits"])],
                              {"W": np.ascontiguousarray(E.T)}), 1.0, None),
    # tied: MatMul by Transpose(embedding (V, H)), then Cohere-style scale written as Mul(const, y)
    "tied": (lambda: _model([helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]), helper.make_node("MatMul", ["x", "Et"], ["y"]),
                             _const("s", 0.25), helper.make_node("Mul", ["s", "y"], ["logits"])], {"E": E}), 0.25, None),
    # Gemm with transB=1 and alpha, then Granite-style division
    "gemm": (lambda: _model([helper.make_node("Gemm", ["x", "E"], ["y"], transB=1, alpha=2.0),
                             helper.make_node("Div", ["y", "d"], ["logits"])], {"E": E, "d": np.array(8.0, np.float32)}), 0.25, None),
    # Gemma-style soft-cap with Constant nodes, and a Cast on the way
    "softcap": (lambda: _model([helper.make_node("MatMul", ["x", "W"], ["y"]), _const("c", 3.0), helper.make_node("Div", ["y", "c"], ["u"]),
                                helper.make_node("Tanh", ["u"], ["t"]), helper.make_node("Mul", ["t", "c"], ["z"]),
                                helper.make_node("Cast", ["z"], ["logits"], to=TensorProto.FLOAT)],
                               {"W": np.ascontiguousarray(E.T)}), 1.0, 3.0),
}


def _run(model, output):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([output], {"x": X})[0]


X = RNG.normal(size=(4, H)).astype(np.float32) * 3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cut_graph_and_head_reproduce_the_logits(variant):
    build, scale, cap = VARIANTS[variant]
    model = build()
    want = _run(model, "logits").astype(np.float64)  # (N, V), the uncut graph
    head = find_head(model.graph)
    assert head.weight.shape == (V, H) and np.array_equal(head.weight, E)
    assert head.logit_scale == pytest.approx(scale) and head.softcap == (pytest.approx(cap) if cap else None)
    cut = cut_head(model, head)
    assert [o.name for o in cut.graph.output] == ["last_hidden_state"]
    assert not any(n.op_type in ("MatMul", "Gemm", "Tanh") for n in cut.graph.node)  # the head left the graph
    hidden = _run(cut, "last_hidden_state").astype(np.float64)  # (N, H)
    got = hidden @ head.weight.astype(np.float64).T * head.logit_scale
    if head.softcap:
        got = head.softcap * np.tanh(got / head.softcap)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_bias_and_a_second_tanh_are_refused():
    biased = _model([helper.make_node("Gemm", ["x", "E", "b"], ["logits"], transB=1)], {"E": E, "b": np.ones(V, np.float32)})
    with pytest.raises(AdoptError, match="adds a bias"):
        find_head(biased.graph)
    twice = _model([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Tanh", ["y"], ["t"]),
                    helper.make_node("Tanh", ["t"], ["logits"])], {"W": np.ascontiguousarray(E.T)})
    with pytest.raises(AdoptError, match="more than one Tanh"):
        find_head(twice.graph)


def test_no_logits_output_is_refused():
    model = _model([helper.make_node("MatMul", ["x", "W"], ["logits"])], {"W": np.ascontiguousarray(E.T)})
    model.graph.output[0].name = "scores"
    with pytest.raises(AdoptError, match="no 'logits' output .outputs: scores"):
        find_head(model.graph)
