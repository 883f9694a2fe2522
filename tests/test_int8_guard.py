"""The INT8 guard (tests/td_int8.py) and TYPED_DECISIONS_CPU_CLASS (typed_decisions/cpu.py): a
u8*s8 graph with 8-bit weights opened as a class whose u8*s8 kernel saturates fails the test that
opened it, and the helper hands such a test the graph the runtime would run."""

from __future__ import annotations

import numpy as np
import pytest
from td_int8 import Guard, graph_this_cpu_runs, saturating_weights

from typed_decisions.cpu import FORCE_ENV, cpu_class, cpu_flags, describe, forced_class

K, N = 64, 8


def _integer_matmul(weight_max: int) -> tuple[bytes, np.ndarray]:
    """y = (a - 0) @ w as one MatMulInteger (uint8 activations, int8 weights at +-weight_max)."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.where(np.arange(K * N).reshape(K, N) % 3 == 0, -weight_max, weight_max).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, K])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None, N])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.uint8), "az"),
         numpy_helper.from_array(np.array(0, np.int8), "wz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString(), w


def test_saturating_weights_are_those_beyond_7_bits():
    import onnx

    wide, _ = _integer_matmul(127)
    narrow, _ = _integer_matmul(64)  # 255 * (64 + 64) = 32640: no int16 pair sum saturates
    assert saturating_weights(onnx.load_from_string(wide), None) == ["w"]
    assert saturating_weights(onnx.load_from_string(narrow), None) == []


def test_the_guard_refuses_8_bit_u8s8_where_the_kernel_saturates(monkeypatch):
    guard = Guard()
    wide, _ = _integer_matmul(127)
    narrow, _ = _integer_matmul(63)
    monkeypatch.setenv(FORCE_ENV, "avx2")
    with pytest.raises(RuntimeError, match=r"class avx2, whose u8\*s8 kernel saturates.*int8_u8s8"):
        guard.check(wide)
    guard.check(narrow)  # 7-bit weights: exact on every class
    monkeypatch.setenv(FORCE_ENV, "avx512-vnni")
    guard.check(wide)
    assert [(o.kernel, o.cpu) for o in guard.opened] == [
        ("u8s8 8-bit weights", "avx2"), ("integer, exact everywhere", "avx2"), ("u8s8 8-bit weights", "avx512-vnni")]
    assert guard.summary() == [
        "1 session(s) of integer, exact everywhere graphs on class avx2",
        "1 session(s) of u8s8 8-bit weights graphs on class avx2",
        "1 session(s) of u8s8 8-bit weights graphs on class avx512-vnni"]


@pytest.mark.int8_u8s8("checks that the guard lets a marked test through")
def test_a_marked_test_may_open_it(monkeypatch, request):
    guard = Guard()
    guard.test = request.node
    monkeypatch.setenv(FORCE_ENV, "avx2")
    guard.check(_integer_matmul(127)[0])
    assert guard.opened[0].allowed_by == "checks that the guard lets a marked test through"


def test_the_guard_is_installed_in_this_session(monkeypatch):
    import onnxruntime as ort

    monkeypatch.setenv(FORCE_ENV, "avx2")
    with pytest.raises(RuntimeError, match="INT8 guard"):
        ort.InferenceSession(_integer_matmul(127)[0], providers=["CPUExecutionProvider"])


def test_graph_this_cpu_runs_is_the_runtimes_choice(tmp_path, monkeypatch):
    """As AVX2: the u8*u8 twin, exact on this machine's kernel whatever its class; as VNNI: the
    graph itself. Oracle: the integer product in numpy."""
    import onnx
    import onnxruntime as ort

    model, w = _integer_matmul(127)
    path = tmp_path / "q.onnx"
    path.write_bytes(model)
    monkeypatch.setenv(FORCE_ENV, "avx512-vnni")
    assert graph_this_cpu_runs(path) == path
    monkeypatch.setenv(FORCE_ENV, "avx2")
    twin = graph_this_cpu_runs(path)
    assert twin == tmp_path / "q.u8u8.onnx" and saturating_weights(onnx.load(str(twin)), tmp_path) == []
    a = np.full((2, K), 255, np.uint8)
    a[1, ::2] = 0
    y = ort.InferenceSession(str(twin), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    np.testing.assert_array_equal(y, a.astype(np.int64) @ w.astype(np.int64))


def test_the_forced_class_is_checked_and_recorded(monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    native = cpu_class()
    assert forced_class() is None and "forced_by" not in describe() and native == cpu_class(cpu_flags())
    monkeypatch.setenv(FORCE_ENV, "avx2")
    assert cpu_class() == "avx2" and describe()["class"] == "avx2" and FORCE_ENV in describe()["forced_by"]
    assert cpu_class({"avx2", "avx512_vnni"}) == "avx512-vnni"  # flags given: the flags decide
    monkeypatch.setenv(FORCE_ENV, "avx3")
    with pytest.raises(ValueError, match=f"{FORCE_ENV}='avx3': expected one of amx, avx512-vnni, avx2, other"):
        cpu_class()
