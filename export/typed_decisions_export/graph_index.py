"""Producer, consumer and constant look-ups over one ONNX graph.

Shared by the graph rewrites that match patterns in someone's graph: the adopter's LM-head search
(adopt/graph.py) and the exporter's softmax-guard rewrite (softmax_guard.py). Built once per
rewrite; it indexes the graph as it was when built.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class GraphIndex:
    """Who makes each tensor, who reads it, and the value of constant tensors."""

    def __init__(self, graph: Any):
        from onnx import numpy_helper

        self.graph = graph
        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.initializers = {init.name: init for init in graph.initializer}
        self._numpy = numpy_helper.to_array

    def constant(self, name: str) -> np.ndarray | None:
        """The value of `name` when it is an initializer or a Constant node's output, else None
        (also for an initializer whose external data was not loaded)."""
        if name in self.initializers:
            init = self.initializers[name]
            if init.data_location == init.EXTERNAL:
                return None
            return self._numpy(init)
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    return self._numpy(attr.t)
                if attr.name in ("value_float", "value_int"):
                    return np.array(attr.f if attr.name == "value_float" else attr.i)
        return None

    def scalar(self, name: str) -> float | None:
        value = self.constant(name)
        return float(value.reshape(())) if value is not None and value.size == 1 else None


__all__ = ["GraphIndex"]
