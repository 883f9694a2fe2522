"""Adopt an ONNX decoder someone else exported (Optimum's layout) instead of re-exporting it.

`adopt_onnx(SRC, OUT)` (command line: `typed-decisions adopt SRC --out DIR`) finds the LM head of
a graph that returns `logits`, cuts it off so that the graph returns `last_hidden_state` and the
`present.*`, writes the head's rows to `lm_head.npy`, the tokenizer, chat template and manifest,
and checks the result against the unmodified graph. Torch-free: onnx, numpy, tokenizers and ONNX
Runtime. Modules: source.py (what may be adopted), graph.py (the rewrite), tokenizer.py,
check.py (the self-check), adopter.py (the order of the steps), cli.py.
"""

from .adopter import adopt_onnx
from .errors import AdoptError

__all__ = ["AdoptError", "adopt_onnx"]
