"""The ``llama_cpp`` peer: llama-cpp-python on the GGUF (its own quantized weights), the logits of
the allowed tokens after each readout context, with or without its own prefix reuse. Only if
``import llama_cpp`` works (bench.py's ``--llama-site`` names a throwaway venv holding it; the
build is in docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np


def import_llama_cpp(site: str | Path | None = None, name: str = "llama_cpp") -> ModuleType:
    """``import llama_cpp``, or else the package ``name`` found in the directory ``site`` (a throwaway
    venv's site-packages), loaded from there without putting that directory on ``sys.path``: its
    other packages (that venv's numpy) must not shadow this interpreter's. The package's own
    submodules load from its folder; its third-party imports come from this interpreter.

    >>> import_llama_cpp(None, name="json").__name__
    'json'
    """
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        if not site or not Path(site).is_dir():
            raise
    spec = importlib.machinery.PathFinder.find_spec(name, [str(site)])
    if spec is None or spec.loader is None:
        raise ImportError(f"no package {name!r} in {site}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class LlamaCpp:
    """llama-cpp-python on the GGUF: each context's logits of the allowed tokens.

    ``reuse=True`` keeps the KV of the longest common prefix with the previous context and
    evaluates only the rest (what llama.cpp's own prompt cache does: one prefill of the state,
    then a short branch per question suffix and label node); ``reuse=False`` evaluates every
    context from scratch. The logits are read with ``llama_get_logits_ith(ctx, -1)`` (the last
    token of the last ``eval``): ``Llama.scores`` is filled only with ``logits_all=True``, and
    reading it otherwise compares against an unfilled buffer."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int):
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads,
                                   n_ctx=n_ctx, n_batch=512, logits_all=False, verbose=False)
        self.version = llama_cpp.__version__
        self.n_vocab = self.llm.n_vocab()

    def _last_logits(self) -> np.ndarray:
        """The logits of the last evaluated token, (n_vocab,) float64 (a copy)."""
        ptr = self.llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)

    def _truncate(self, n: int) -> None:
        """Forget every token from position ``n`` on (its KV and the Python-side token count)."""
        llm = self.llm
        llm.n_tokens = n
        ctx = llm._ctx
        for name in ("memory_seq_rm", "kv_cache_seq_rm"):  # renamed in llama.cpp's memory API
            if hasattr(ctx, name):
                getattr(ctx, name)(-1, n, -1)
                return
        raise RuntimeError("this llama-cpp-python has no memory_seq_rm / kv_cache_seq_rm")

    def logits(self, contexts: list[tuple[int, ...]], allowed: list[tuple[int, ...]], reuse: bool
               ) -> tuple[list[np.ndarray], int]:
        llm, out, computed = self.llm, [], 0
        for c, a in zip(contexts, allowed):
            have = list(llm.input_ids[: llm.n_tokens]) if reuse else []
            n = 0
            while n < min(len(have), len(c) - 1) and have[n] == c[n]:
                n += 1
            self._truncate(n)
            llm.eval(list(c[n:]))
            computed += len(c) - n
            out.append(self._last_logits()[list(a)])
        return out, computed
