"""Fixtures shared by the integration packages' tests (the real tiny model comes from tests/conftest.py).

``fake_decider``: a fresh ``td_fakes.FakeDecider`` — the Decider's interface with deterministic
probabilities, for fast unit tests of routing rules, batching and config propagation.
"""

from __future__ import annotations

import pytest
from td_fakes import FakeDecider


@pytest.fixture
def fake_decider() -> FakeDecider:
    return FakeDecider()


@pytest.fixture
def make_fake() -> type[FakeDecider]:
    """The ``FakeDecider`` class, for tests that need their own name or boost."""
    return FakeDecider
