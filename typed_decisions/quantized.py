"""INT8 exports on the serving CPU: may rows be batched, and does this CPU compute what the export
measured?

An INT8 export records how its activations are quantized and on which CPU class its drift was
measured (``manifest.quantization``: ``row_independent``, ``cpu``, ``load_check``). Per-token
exports store integers that no x86 kernel can overflow, so every CPU class computes the same
products; the float32 parts of the graph may still round differently. So at load:

- same CPU class as measured: nothing to do;
- another class: re-run the recorded probe prompts (``load_check``, two short prompts) and compare
  their probabilities with the recorded ones; refuse above ``REFUSE_ABOVE``, warn above
  ``WARN_ABOVE``; the result is kept on the engine (``engine.cpu_check``) and logged;
- an export with per-tensor 8-bit activations (made before per-token quantization) on a CPU
  without VNNI/AMX: refused, because there its u8·s8 products saturate int16 and are wrong.

Never a silent change of numbers: a refusal names the export, both CPU classes and the fix.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .cpu import cpu_class
from .errors import EngineError
from .readout import restricted_softmax

if TYPE_CHECKING:
    from .artifacts import Artifacts

# logits(contexts, allowed) -> one float64 vector per context: the engine's, each context alone
Logits = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], list[np.ndarray]]

REFUSE_ABOVE = 0.02  # max |dp| on the load-check probes: the CPU computes something else
WARN_ABOVE = 1e-4    # float rounding differs between kernels by ~1e-6; more deserves a look
EXACT_CLASSES = ("avx512-vnni", "amx")  # int32 accumulation: any 8-bit u8·s8 product is exact

log = logging.getLogger("typed_decisions")


def rows_independent(artifacts: Artifacts) -> bool:
    """Whether a row's result is independent of the other rows of a run (so rows may be batched).

    False for INT8 exports with per-tensor activation scales (one scale per run mixes the rows)
    and for sliding-window attention (its window counts cache slots, so the padding slots of a
    batched row would shift it)."""
    q = artifacts.quantization
    if q is not None and not q.get("row_independent", False):
        return False
    return not artifacts.architecture.sliding_window


def graph_file(quantization: dict[str, Any] | None, here: str | None = None) -> str | None:
    """The INT8 graph this CPU class runs, relative to the export (None: the manifest's
    ``onnx_file``). Exports with 8-bit weights carry two graphs over one weight file
    (``quantization.graphs``): ``u8s8`` for VNNI/AMX, whose u8·s8 kernels accumulate in int32, and
    ``u8u8`` for every other CPU, where u8·s8 pair sums saturate int16 but u8·u8 ones cannot.
    Both compute the same integers.

    >>> q = {"graphs": {"u8s8": "model.int8.onnx", "u8u8": "model.int8.u8u8.onnx"}}
    >>> graph_file(q, "avx512-vnni"), graph_file(q, "avx2"), graph_file(None, "avx2")
    ('model.int8.onnx', 'model.int8.u8u8.onnx', None)
    """
    graphs = (quantization or {}).get("graphs")
    if not graphs:
        return None
    here = here or cpu_class()
    return graphs["u8s8"] if here in EXACT_CLASSES or "u8u8" not in graphs else graphs["u8u8"]


def _exact_here(q: dict[str, Any], here: str) -> bool:
    """Whether this CPU computes the integers the export stores (see graph_file)."""
    if here in EXACT_CLASSES or (q.get("graphs") or {}).get("u8u8"):
        return True
    return bool((q.get("integer_format") or {}).get("exact_without_vnni", q.get("row_independent", False)))


def refuse_where_inexact(artifacts: Artifacts, here: str | None = None) -> None:
    """Refuse an INT8 export whose integers this CPU class cannot compute (see the module
    docstring), before any of its graphs is loaded; nothing for float32 exports."""
    q = artifacts.quantization
    if q is None:
        return
    here = here or cpu_class()
    name = artifacts.root
    if not q.get("row_independent", False) and here not in EXACT_CLASSES:
        raise EngineError(
            f"{name} is an INT8 export with per-tensor 8-bit activations; on this CPU (class {here}, no VNNI/AMX) "
            f"its u8*s8 products saturate int16 and its answers are wrong. Re-quantize it "
            f"(typed-decisions export SOURCE --out DIR --quantize int8: per-token, exact on every CPU) "
            f"or serve the float32 export.")
    if not _exact_here(q, here):
        raise EngineError(
            f"{name} is an INT8 export with 8-bit weights and no u8*u8 graph; on this CPU (class {here}, no VNNI/AMX) "
            f"its u8*s8 products saturate int16 and its answers are wrong. Re-quantize it with this version "
            f"(it writes {name}/model.int8.u8u8.onnx for such CPUs) or serve the float32 export.")


def check_cpu(artifacts: Artifacts, logits: Logits, here: str | None = None) -> dict[str, Any] | None:
    """Check an INT8 export against this CPU (see the module docstring); None for float32 exports.
    ``logits`` computes the probes as the serving engine does, each probe alone (the engine runs
    this after it is built, and ``refuse_where_inexact`` before).

    Returns what was found: ``{"cpu", "measured_on", "max_abs_prob" (None when not re-run)}``.
    """
    q = artifacts.quantization
    if q is None:
        return None
    here = here or cpu_class()
    refuse_where_inexact(artifacts, here)
    measured_on = (q.get("cpu") or {}).get("class")
    name = artifacts.root
    check = q.get("load_check")
    found: dict[str, Any] = {"cpu": here, "measured_on": measured_on, "max_abs_prob": None}
    if check is None or measured_on == here:
        return found
    allowed = [check["candidates"]] * len(check["input_ids"])
    probs = np.array([restricted_softmax(z) for z in logits(check["input_ids"], allowed)])  # (probes, candidates)
    dp = float(np.abs(probs - np.asarray(check["probabilities"])).max())
    found["max_abs_prob"] = dp
    message = (f"{name}: INT8 drift measured on a {measured_on} CPU, serving on {here}: the recorded probes "
               f"moved by {dp:.2g} (refused above {REFUSE_ABOVE}, warned above {WARN_ABOVE})")
    if dp > REFUSE_ABOVE:
        raise EngineError(message + ". Re-quantize the float32 export on this machine or serve float32.")
    if dp > WARN_ABOVE:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.info(message)
    return found


__all__ = ["EXACT_CLASSES", "Logits", "REFUSE_ABOVE", "WARN_ABOVE", "check_cpu", "graph_file", "refuse_where_inexact", "rows_independent"]
