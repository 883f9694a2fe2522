"""softmax_guard.drop_softmax_nan_guards against the graph it rewrites, run by ONNX Runtime.

Oracle: the same attention graph with its guard (what torch.onnx writes), on the same inputs. For
every query row that sees at least one column the rewritten graph must give the same numbers to
the bit, whatever the scores (large, tiny, ties); a fully masked row, zeros before, must come out
finite. Graphs that differ from the pattern in any way are left exactly as they were.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from typed_decisions_export.softmax_guard import LOWEST_BIAS, drop_softmax_nan_guards

B, H, S, T, D = 2, 3, 4, 6, 5


def attention_graph(layers: int = 2, *, mask_name: str = "attention_mask", guard_output: bool = False,
                    softmax_axis: int = -1, extra_reader: bool = False, neg: float = -np.inf) -> onnx.ModelProto:
    """torch.onnx's SDPA pattern: one bias Where(mask, 0, -inf), per layer Softmax(scores + bias),
    Where(IsNaN(p), 0, p), then p @ V. Each layer's scores are an input (so they can be anything)."""
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(mask_name, TensorProto.BOOL, [B, 1, S, T]),
              helper.make_tensor_value_info("v", f32, [B, H, T, D])]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(neg, np.float32), "neg_inf")]
    nodes = [helper.make_node("Where", [mask_name, "zero", "neg_inf"], ["bias"])]
    outputs = []
    for i in range(layers):
        inputs.append(helper.make_tensor_value_info(f"scores{i}", f32, [B, H, S, T]))
        nodes += [helper.make_node("Add", [f"scores{i}", "bias"], [f"logits{i}"]),
                  helper.make_node("Softmax", [f"logits{i}"], [f"p{i}"], axis=softmax_axis),
                  helper.make_node("IsNaN", [f"p{i}"], [f"nan{i}"]),
                  helper.make_node("Where", [f"nan{i}", "zero", f"p{i}"], [f"guarded{i}"]),
                  helper.make_node("MatMul", [f"guarded{i}", "v"], [f"out{i}"])]
        outputs.append(helper.make_tensor_value_info(f"out{i}", f32, [B, H, S, D]))
        if guard_output:
            outputs.append(helper.make_tensor_value_info(f"guarded{i}", f32, [B, H, S, T]))
    if extra_reader:  # something besides the softmaxes reads the bias
        nodes.append(helper.make_node("Identity", ["bias"], ["bias_copy"]))
        outputs.append(helper.make_tensor_value_info("bias_copy", f32, [B, 1, S, T]))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def feeds(rng: np.random.Generator, mask: np.ndarray, scale: float, layers: int = 2) -> dict[str, np.ndarray]:
    f = {"attention_mask": mask, "v": rng.standard_normal((B, H, T, D)).astype(np.float32)}
    for i in range(layers):
        f[f"scores{i}"] = (scale * rng.standard_normal((B, H, S, T))).astype(np.float32)
    return f


def random_mask(rng: np.random.Generator, fully_masked_rows: int = 0) -> np.ndarray:
    mask = rng.random((B, 1, S, T)) < 0.5
    mask[..., np.arange(S), np.arange(S)] = True  # every row sees a column...
    for r in range(fully_masked_rows):  # ...but these
        mask[r % B, 0, r % S, :] = False
    return mask


@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0, 1e4])
def test_rows_that_see_a_column_get_the_same_numbers_to_the_bit(scale):
    rng = np.random.default_rng(int(scale * 1000) % 2**32)
    before = attention_graph()
    after = attention_graph()
    assert drop_softmax_nan_guards(after.graph) == 2
    ops = [n.op_type for n in after.graph.node]
    assert "IsNaN" not in ops and ops.count("Where") == 1
    for trial in range(5):
        f = feeds(rng, random_mask(rng), scale)
        if trial == 4:  # ties: every score of a row equal
            f["scores0"][:] = 2.5
        for a, b in zip(run(before, f), run(after, f)):
            assert np.isfinite(a).all()
            np.testing.assert_array_equal(a, b)


def test_a_fully_masked_row_is_finite_and_the_others_unchanged():
    rng = np.random.default_rng(7)
    before, after = attention_graph(), attention_graph()
    drop_softmax_nan_guards(after.graph)
    mask = random_mask(rng, fully_masked_rows=2)
    f = feeds(rng, mask, 3.0)
    seen = mask[:, 0].any(-1)  # (B, S): rows that see a column
    for a, b in zip(run(before, f), run(after, f)):
        assert np.isfinite(b).all()
        np.testing.assert_array_equal(a.transpose(0, 2, 1, 3)[seen], b.transpose(0, 2, 1, 3)[seen])
        assert (a.transpose(0, 2, 1, 3)[~seen] == 0).all()  # the guard's zeros, before


def test_the_new_bias_is_the_lowest_float_and_the_rewrite_runs_once():
    model = attention_graph(layers=3)
    assert drop_softmax_nan_guards(model.graph) == 3
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert inits[LOWEST_BIAS] == np.finfo(np.float32).min and "neg_inf" not in inits
    onnx.checker.check_model(model)
    again = model.SerializeToString()
    assert drop_softmax_nan_guards(model.graph) == 0 and model.SerializeToString() == again


def test_a_bias_that_is_already_the_lowest_float_loses_only_its_guards():
    """Some exports (the tiny test models') add the lowest float32, not -inf: their guards never
    fire, so dropping them changes no number at all, fully masked rows included."""
    rng = np.random.default_rng(3)
    lowest = float(np.finfo(np.float32).min)
    before, after = attention_graph(neg=lowest), attention_graph(neg=lowest)
    assert drop_softmax_nan_guards(after.graph) == 2
    assert LOWEST_BIAS not in {t.name for t in after.graph.initializer}
    f = feeds(rng, random_mask(rng, fully_masked_rows=2), 3.0)
    for a, b in zip(run(before, f), run(after, f)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("variant", [
    {"mask_name": "mask"},          # the bias is not built from the graph's attention_mask input
    {"guard_output": True},         # the guard's output is itself a graph output
    {"softmax_axis": 2},            # softmax over another axis
    {"extra_reader": True},         # something else reads the -inf bias
    {"neg": -1e9},                  # a finite bias: not the pattern
])
def test_anything_else_is_left_as_it_was(variant):
    model = attention_graph(**variant)
    before = model.SerializeToString()
    assert drop_softmax_nan_guards(model.graph) == 0
    assert model.SerializeToString() == before
