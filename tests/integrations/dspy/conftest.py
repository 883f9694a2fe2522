"""DSPy test isolation: a fresh in-memory DSPy cache per test (never the user's disk cache)."""

from __future__ import annotations

import dspy
import pytest


@pytest.fixture(autouse=True)
def _memory_cache():
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    yield
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
