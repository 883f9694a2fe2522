"""Every INT8 graph a test runs is the graph this CPU class runs (issue #34).

ONNX Runtime's u8·s8 integer kernel sums pairs of products in a saturating int16 on CPUs without
VNNI/AMX (typed_decisions/cpu.py), so a u8·s8 graph with 8-bit weights computes wrong integers
there; the runtime runs the u8·u8 twin instead (quantized.graph_file). A test that runs the u8·s8
graph directly passes on a VNNI machine and fails, or worse compares garbage, on an AVX2 one.

- `graph_this_cpu_runs(path)`: the graph to run for a u8·s8 INT8 graph, chosen as the runtime
  chooses (its u8·u8 twin, written beside it, where the u8·s8 kernel is not exact).
- The guard (`install`, called from conftest): every `onnxruntime.InferenceSession` a test session
  opens is inspected; one whose integer MatMuls read int8 weights beyond 7 bits, opened on a class
  whose u8·s8 kernel is not exact, fails the test with the reason, unless the test is marked
  `@pytest.mark.int8_u8s8("why")` (a negative control, a kernel check that skips itself, or two
  graphs compared on the same kernel). Every integer graph opened is listed at the end of the run
  with the CPU class it ran on.

`TYPED_DECISIONS_CPU_CLASS=avx2` makes a VNNI machine select as an AVX2 one does, so the guard
catches there what AVX2 would; under `qemu-x86_64 -cpu EPYC-Rome` the AVX2 kernels run for real
(docs/export.md, "Testing the AVX2 path").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# input index of the int8 weight of each integer MatMul (ONNX and com.microsoft ops)
WEIGHT_INPUT = {"MatMulInteger": 1, "MatMulIntegerToFloat": 1, "DynamicQuantizeMatMul": 1, "QLinearMatMul": 3}
PAIR_SAFE = 64  # |w| <= 64: 255 * (|w1| + |w2|) <= 32640 < 32767, no int16 pair sum can saturate
MARKER = "int8_u8s8"


def _int8_values(tensor: Any, base: Path | None) -> np.ndarray:
    from onnx import numpy_helper

    location = {e.key: e.value for e in tensor.external_data}
    if tensor.data_location == 1 or "location" in location:  # TensorProto.EXTERNAL
        if base is None:
            raise ValueError(f"{tensor.name}: external data without a directory to read it from")
        count = int(np.prod(tensor.dims))
        return np.fromfile(base / location["location"], np.int8, count=count, offset=int(location.get("offset", 0)))
    return numpy_helper.to_array(tensor)


def saturating_weights(model: Any, base: Path | None) -> list[str]:
    """The int8 weights of integer MatMuls in `model` (an onnx.ModelProto) that exceed 7 bits, so
    that a u8·s8 kernel without VNNI/AMX may saturate on them. [] for float graphs, u8·u8 graphs
    (their weights are uint8) and 7-bit graphs."""
    from onnx import TensorProto

    inits = {t.name: t for t in model.graph.initializer}
    found: list[str] = []
    for node in model.graph.node:
        at = WEIGHT_INPUT.get(node.op_type)
        if at is None or len(node.input) <= at or node.input[at] in found:
            continue
        w = inits.get(node.input[at])
        if w is not None and w.data_type == TensorProto.INT8 and np.abs(_int8_values(w, base).astype(np.int16)).max() > PAIR_SAFE:
            found.append(w.name)
    return found


def exact_here() -> bool:
    """Whether the u8·s8 kernel of the class this process runs as accumulates exactly."""
    from typed_decisions.cpu import cpu_class
    from typed_decisions.quantized import EXACT_CLASSES

    return cpu_class() in EXACT_CLASSES


def graph_this_cpu_runs(path: Path) -> Path:
    """The graph the runtime would run for the INT8 graph `path` on this CPU class: `path` itself,
    or (8-bit weights on a class without VNNI/AMX) its u8·u8 twin, written once beside it."""
    import onnx

    path = Path(path)
    if exact_here() or not saturating_weights(onnx.load(str(path), load_external_data=False), path.parent):
        return path
    from typed_decisions_export.int8.u8u8 import write_u8u8_graph

    twin = path.with_name(path.name.removesuffix(".onnx") + ".u8u8.onnx")
    if not twin.is_file():
        write_u8u8_graph(path, twin)
    return twin


@dataclass
class Opened:
    test: str
    graph: str
    kernel: str  # "u8s8 8-bit weights" | "integer, exact everywhere"
    cpu: str
    allowed_by: str | None  # the marker's reason, when the test is marked


class Guard:
    """Wraps onnxruntime.InferenceSession.__init__ for one test session (see the module docstring)."""

    def __init__(self) -> None:
        self.opened: list[Opened] = []
        self.test: Any = None  # the pytest item running now (fixtures included)

    def check(self, source: Any) -> None:
        import onnx

        from typed_decisions.cpu import cpu_class

        if isinstance(source, (str, Path)):
            path = Path(source)
            model, base, label = onnx.load(str(path), load_external_data=False), path.parent, str(path)
        elif isinstance(source, (bytes, bytearray)):
            model, base, label = onnx.load_from_string(bytes(source)), None, "<in-memory model>"
        else:
            return
        if not any(n.op_type in WEIGHT_INPUT for n in model.graph.node):
            return
        wide = saturating_weights(model, base)
        marker = self.test.get_closest_marker(MARKER) if self.test is not None else None
        reason = (marker.args[0] if marker.args else marker.kwargs.get("reason", "")) if marker else None
        test = self.test.nodeid if self.test is not None else "<outside a test>"
        here = cpu_class()
        self.opened.append(Opened(test, label, "u8s8 8-bit weights" if wide else "integer, exact everywhere", here, reason))
        if wide and not exact_here() and marker is None:
            raise RuntimeError(
                f"INT8 guard (tests/td_int8.py): {test} opens {label}, a u8*s8 graph with 8-bit weights "
                f"({', '.join(wide[:3])}{' ...' if len(wide) > 3 else ''}), on a CPU of class {here}, whose u8*s8 kernel "
                f"saturates int16 pair sums: its numbers are wrong here. Run the graph this class runs "
                f"(td_int8.graph_this_cpu_runs, quantized.graph_file), or mark the test "
                f"@pytest.mark.{MARKER}('why') and skip it where the kernel is not exact.")

    def install(self) -> None:
        import onnxruntime as ort

        original = ort.InferenceSession.__init__
        guard = self

        def __init__(session: Any, path_or_bytes: Any, *args: Any, **kwargs: Any) -> None:
            guard.check(path_or_bytes)
            original(session, path_or_bytes, *args, **kwargs)

        ort.InferenceSession.__init__ = __init__  # type: ignore[method-assign]

    def summary(self) -> list[str]:
        """One line per kernel and class: what the session ran, so a reader sees which CPU class
        judged each INT8 graph."""
        counts: dict[tuple[str, str, bool], int] = {}
        for o in self.opened:
            key = (o.kernel, o.cpu, o.allowed_by is not None)
            counts[key] = counts.get(key, 0) + 1
        return [f"{n} session(s) of {kernel} graphs on class {cpu}" + (" (marked int8_u8s8)" if marked else "")
                for (kernel, cpu, marked), n in sorted(counts.items())]
