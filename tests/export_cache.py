"""On-disk cache of the exports the tests use (runtime, server, integration and exporter tests).

A cached export lives in `typed_decisions.models.cache_dir() / "exports" / "test-<key>-<hash>"`,
where the hash covers the exporter's sources: change the exporter and the next run re-exports,
and the copies made by other exporter versions are deleted (they are ~0.6 GB each) once unused for
STALE_AFTER_S: another checkout's test run may be reading one right now (each use touches it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

# Subpackages of typed_decisions_export that never run while these exports are made (the
# adopter rewrites someone else's ONNX): editing them must not re-export every test model.
NOT_EXPORTER = {"adopt"}
STALE_AFTER_S = 6 * 3600  # a copy for another exporter version is deleted after this long unused


def export_code_hash() -> str:
    """Hash of the exporter's sources: a cached export is rebuilt when the exporter changes (or the
    studies beside it, export/studies/, which make the per-tensor fixture)."""
    import typed_decisions_export

    root = Path(typed_decisions_export.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if p.relative_to(root).parts[0] in NOT_EXPORTER:
            continue
        h.update(p.name.encode() + p.read_bytes())
    for p in sorted((root.parent / "studies").glob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:12]


def inputs_hash(*files: Path) -> str:
    """Hash of the files a cached fixture is made from (e.g. the tiny random models' recipe) and of the
    versions of the libraries that make it, for a cache key beside the exporter's hash."""
    from importlib.metadata import version

    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + p.read_bytes())
    for dist in ("torch", "transformers", "onnx", "onnxscript", "gguf", "numpy"):
        h.update(f"{dist}=={version(dist)}".encode())
    return h.hexdigest()[:8]


def cached_export(key: str, build, *, marker: str = "manifest.json", inputs: tuple[Path, ...] = ()) -> Path:
    """cache_dir()/exports/test-<key>-<hash>: reused when finished (``marker`` exists in it), else
    built in a temporary sibling and renamed, so an interrupted build is never mistaken for a finished
    one. The hash is the exporter's, or with ``inputs`` the exporter's and ``inputs_hash(*inputs)``."""
    from typed_decisions.models import cache_dir

    digest = export_code_hash()
    if inputs:
        digest = hashlib.sha256((digest + inputs_hash(*inputs)).encode()).hexdigest()[:12]
    final = cache_dir() / "exports" / f"test-{key}-{digest}"
    if (final / marker).is_file():
        os.utime(final)  # in use: not stale for another checkout's run
        return final
    stale = re.compile(rf"test-{re.escape(key)}-[0-9a-f]{{12}}")
    for old in final.parent.glob(f"test-{key}-*"):
        if old != final and stale.fullmatch(old.name) and time.time() - old.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)
    work = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    build(work)
    if (final / marker).is_file():  # someone else finished first
        shutil.rmtree(work, ignore_errors=True)
    else:
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    return final


def traced_and_built(key: str, source: Path, out: Path, *, builder: str = "on", inputs: tuple[Path, ...] = (),
                     **export_args) -> dict[str, tuple[Path, dict]]:
    """The same source exported twice, for the builder tests: the traced export (torch.onnx), their
    oracle and most of their time, cached on disk (``cached_export(key, ..., inputs=inputs)``), and the
    graph builder's made afresh in ``out``. {"traced" | "builder": (directory, manifest)}."""
    from typed_decisions_export import export_model

    traced = cached_export(key, lambda work: export_model(source, work, progress=False, builder="off", **export_args),
                           inputs=inputs)
    return {"traced": (traced, json.loads((traced / "manifest.json").read_text())),
            "builder": (out, export_model(source, out, progress=False, builder=builder, **export_args))}


STATES = [  # the support-ticket states the export comparisons ask (builder, adopted graphs)
    "I was charged twice for my subscription this month. Please refund the duplicate charge today.",
    "Do you offer a discount for schools that buy forty licences at once?",
    "The app crashes when I open invoices, and the outage started an hour ago.",
]


class Lazy(dict):
    """A dict that makes a missing key's value once (``make(key)``): exports per architecture,
    built on first use within a test module."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, key):
        self[key] = self._make(key)
        return self[key]

