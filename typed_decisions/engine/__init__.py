"""The engine: logits of allowed next tokens after token contexts, on ONNX Runtime.

Its rooms, each one idea (read in this order):

- ``kv.py``: KV rows of a batch, and segments stacked into rows;
- ``radix_tree.py``: a call's contexts as a compressed token trie (who shares which node);
- ``tree_block.py``: several nodes of the tree as one row (tree attention masks);
- ``schedule.py``: which nodes to compute, laid out as which rows, grouped into which runs (pure);
- ``backbone.py``: the ONNX Runtime session, its names read from the graph;
- ``prefix_cache.py``: the LRU of prefixes kept across calls;
- ``engine.py``: the thin, thread-safe shell that runs what the schedule plans.
"""

from .backbone import Backbone
from .engine import Engine, EngineStats
from .kv import KVRows, stack_paths
from .radix_tree import build_radix_tree

__all__ = ["Backbone", "Engine", "EngineStats", "KVRows", "build_radix_tree", "stack_paths"]
