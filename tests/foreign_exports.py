"""ONNX exports of the tiny test models made by other tools: Optimum, and onnxruntime-genai's builder.

The adopter's tests need the real thing, not a graph written to look like one.

Optimum:

Optimum's exporter (optimum-onnx) pins transformers < 4.58, while our exporter needs transformers
5, so it cannot live in the project's venv. It gets its own, built once and cached beside the test
exports: `typed_decisions.models.cache_dir() / "optimum-venv-<hash>"`, the hash covering the pins
below and the Python version. Torch is the on-disk CPU wheel (torch==2.13.0, installed first so no
requirement can pull a CUDA build).

`optimum_export(arch)` saves the tiny random model of tests/export/tiny_models.py (seeded) with that
venv's transformers and exports it with `optimum-cli export onnx --task text-generation-with-past`;
it returns the folder holding both, `hf/` (the weights, which our exporter reads too) and `onnx/`
(Optimum's output), cached under `cache_dir() / "exports" / "optimum-<arch>-<hash>"`, the hash also
covering tiny_models.py. Built in a temporary sibling and renamed, as export_cache.py does.

onnxruntime-genai: its model builder (0.18) needs transformers 5, which is the project's own, so
`genai_export(arch)` runs it with this interpreter on the same `hf/` folder, the wheel unpacked
without its dependencies (numpy, onnxruntime: already here) into `cache_dir() / "genai-<hash>"`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

# What `pip install optimum-onnx[onnxruntime]` resolved to on 2026-12-01, frozen so that the
# cache key names what was installed; accelerate lets Optimum de-duplicate tied weights (the tied
# head then reads the embedding through a Transpose, as a user's export would).
PINS = ["torch==2.13.0", "optimum-onnx[onnxruntime]==0.1.0", "optimum==2.1.0", "transformers==4.57.6",
        "accelerate==1.15.0"]
TINY_MODELS = Path(__file__).parent / "export" / "tiny_models.py"


def _hash(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def venv_key() -> str:
    return _hash(" ".join(PINS).encode(), sys.version.split()[0].encode())


def _cache() -> Path:
    from typed_decisions.models import cache_dir

    return cache_dir()


def _run(cmd: list[str], log: Path, **kw) -> None:
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1800, **kw)
    if done.returncode:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {done.returncode}); log {log}:\n{tail}")


def _built(final: Path, build) -> Path:
    """final when finished, else build(work) in a temporary sibling and rename it to final."""
    if (final / ".done").is_file():
        return final
    work = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    build(work)
    (work / ".done").write_text("ok\n")
    if (final / ".done").is_file():  # someone else finished first
        shutil.rmtree(work, ignore_errors=True)
    else:
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    return final


def optimum_venv() -> Path:
    """The throwaway venv (built once; ~1.2 GB, most of it torch)."""

    def build(work: Path) -> None:
        log = work / "build.log"
        _run([sys.executable, "-m", "venv", str(work / "venv")], log)
        pip = [str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q"]
        _run([*pip, PINS[0]], log)  # the on-disk CPU wheel, before anything can ask for torch
        _run([*pip, *PINS], log)

    for old in _cache().glob("optimum-venv-*"):  # venvs of older pins
        if old.name != f"optimum-venv-{venv_key()}" and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    # A venv's scripts name its absolute path, so it is built where it will stay (no rename).
    final = _cache() / f"optimum-venv-{venv_key()}"
    if not (final / ".done").is_file():
        shutil.rmtree(final, ignore_errors=True)
        final.mkdir(parents=True)
        build(final)
        (final / ".done").write_text("ok\n")
    return final / "venv"


GENAI_PIN = "onnxruntime-genai==0.18.0"


def _genai_packages() -> Path:
    """onnxruntime-genai unpacked into its own folder (put on PYTHONPATH by genai_export)."""
    final = _cache() / f"genai-{_hash(GENAI_PIN.encode(), sys.version.split()[0].encode())}"

    def build(work: Path) -> None:
        _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(work / "site"), GENAI_PIN],
             work / "build.log")

    return _built(final, build) / "site"


def genai_export(arch: str) -> Path:
    """Folder written by `python -m onnxruntime_genai.models.builder -p fp32 -e cpu` from the same
    tiny `hf/` folder Optimum exported (GroupQueryAttention graph, genai_config.json)."""
    hf = optimum_export(arch) / "hf"
    final = _cache() / "exports" / f"genai-{arch}-{_hash(GENAI_PIN.encode(), TINY_MODELS.read_bytes())}"

    def build(work: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(_genai_packages())}
        _run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(work / "onnx"),
              "-p", "fp32", "-e", "cpu", "-c", str(work / "hf-cache")], work / "build.log", env=env)
        shutil.rmtree(work / "hf-cache", ignore_errors=True)

    return _built(final, build) / "onnx"


def optimum_export(arch: str) -> Path:
    """Folder with `hf/` (tiny random `arch` model) and `onnx/` (Optimum's export of it)."""
    key = _hash(venv_key().encode(), TINY_MODELS.read_bytes())
    final = _cache() / "exports" / f"optimum-{arch}-{key}"
    for old in final.parent.glob(f"optimum-{arch}-*"):
        if old != final and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)

    def build(work: Path) -> None:
        venv = optimum_venv()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(TINY_MODELS.parent)}
        log = work / "export.log"
        save = f"from pathlib import Path; from tiny_models import save_tiny_model; save_tiny_model({arch!r}, Path({str(work / 'hf')!r}))"
        _run([str(venv / "bin" / "python"), "-c", save], log, env=env)
        _run([str(venv / "bin" / "optimum-cli"), "export", "onnx", "--model", str(work / "hf"),
              "--task", "text-generation-with-past", str(work / "onnx")], log, env=env)

    return _built(final, build)
