"""Fixtures for the exporter tests: tiny random-weight models (tiny_models.py), and cached exports.

Exports of the tiny random models are session-scoped: each is exported once per test run. The
tiny REAL model (SmolLM2-135M-Instruct, GGUF, via
`typed_decisions.models.pull("tiny")`) is exported once per exporter source version and cached on
disk under `typed_decisions.models.cache_dir() / "exports"`, shared with the runtime's tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from export_cache import Lazy as LazyDict
from export_cache import cached_export
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
def spread_folders(tmp_path_factory):
    """arch -> tiny HF folder with spread norm weights and biases (the builder's and direct INT8's
    oracle tests; tests copy a folder before they change it)."""
    root = tmp_path_factory.mktemp("spread")
    return LazyDict(lambda arch: save_tiny_model(arch, root / arch, spread_vectors=True))


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


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF through the catalogue (`pull("tiny")`, cached)."""
    from typed_decisions.models import pull

    return pull("tiny", progress=False)


@pytest.fixture(scope="session")
def smollm2_export(smollm2_gguf) -> tuple[Path, dict]:
    """The tiny real model exported in float32 (cached on disk across runs)."""
    import json

    from typed_decisions_export import export_model

    out = cached_export(
        "smollm2-135m", lambda work: export_model(smollm2_gguf, work, name="smollm2-135m", progress=False)
    )
    return out, json.loads((out / "manifest.json").read_text())
