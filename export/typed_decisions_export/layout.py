"""The files of an export directory, and how a directory is (re)made to hold one.

Shared by export.py (float32) and int8/pipeline.py (INT8), so neither imports the other.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from .errors import ExportError
from .manifest import LM_HEAD_FILE, MANIFEST_FILE
from .tokenizer_files import CHAT_TEMPLATE_FILE, TOKENIZER_FILE

ONNX_FILE = "model.onnx"
INT8_ONNX_FILE = "model.int8.onnx"
INT8_U8U8_ONNX_FILE = "model.int8.u8u8.onnx"  # the same INT8 model for CPUs without VNNI/AMX (int8/u8u8.py, write_u8u8_graph)
SELF_CHECK_FAILURE_FILE = "self_check.failed.json"
# Everything an export may write: an existing directory holding only these can be re-exported into.
KNOWN_FILES = {
    MANIFEST_FILE,
    MANIFEST_FILE + ".tmp",
    ONNX_FILE,
    ONNX_FILE + ".data",
    INT8_ONNX_FILE,
    INT8_ONNX_FILE + ".data",
    INT8_U8U8_ONNX_FILE,
    LM_HEAD_FILE,
    TOKENIZER_FILE,
    CHAT_TEMPLATE_FILE,
    SELF_CHECK_FAILURE_FILE,
    ".verified.json",  # the runtime's hash-stamp cache (typed_decisions.artifacts)
}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def make_logger(progress: bool):
    """A `log(message)` that prints timestamped lines to stderr, or does nothing."""
    start = time.perf_counter()

    def log(message: str) -> None:
        if progress:
            print(f"[typed-decisions-export {time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    return log


def prepare_out_dir(out_dir: Path) -> None:
    """Create out_dir, or clear a previous export in it; refuse a folder holding anything else.

    The manifest goes first, so that an interrupted re-export never looks finished.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in KNOWN_FILES)
    if foreign:
        raise ExportError(f"{out_dir} holds files that are not part of an export ({', '.join(foreign[:5])}); choose an empty --out")
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)
    for name in KNOWN_FILES:
        (out_dir / name).unlink(missing_ok=True)
