"""Fixtures shared by the integration packages' tests (the real tiny model comes from tests/conftest.py).

``fake_decider``: a fresh ``td_fakes.FakeDecider`` — the Decider's interface with deterministic
probabilities, for fast unit tests of routing rules, batching and config propagation.
"""

from __future__ import annotations

import pytest
from td_fakes import FakeDecider


def pytest_configure(config: pytest.Config) -> None:
    # Declared here too so that --strict-markers accepts the filterwarnings marks of the LangChain
    # standard tests when the warnings plugin is off (``-p no:warnings``); harmless otherwise.
    config.addinivalue_line("markers", "filterwarnings(warning): ignore a warning (warnings plugin)")


@pytest.fixture
def fake_decider() -> FakeDecider:
    return FakeDecider()


@pytest.fixture
def make_fake() -> type[FakeDecider]:
    """The ``FakeDecider`` class, for tests that need their own name or boost."""
    return FakeDecider
