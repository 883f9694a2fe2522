"""The lock of the README's two commands (requirements/, scripts/lockfile.py): it meets every
pyproject.toml range, and the environment scripts/setup.sh made is exactly the lock."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("lockfile", ROOT / "scripts" / "lockfile.py")
lockfile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lockfile)


@pytest.fixture(scope="module")
def pins():
    path = lockfile.lock_path()
    assert path.is_file(), f"no lock for Python {sys.version_info[0]}.{sys.version_info[1]}: run scripts/lock.sh"
    return lockfile.read_lock(path)


def test_the_lock_meets_every_pyproject_range(pins):
    assert lockfile.range_problems(pins) == []


def test_the_lock_pins_the_cpu_torch_and_the_community_suites(pins):
    assert pins["torch"] == Version("2.13.0")
    assert (pins["jevcompat"], pins["jevbench"]) == (Version("0.1.1"), Version("0.1.0"))
    assert not {"nvidia-cudnn-cu12", "nvidia-cublas-cu12", "onnxruntime-gpu"} & set(pins)


def test_a_pin_outside_a_range_or_missing_is_named(pins):
    moved = dict(pins) | {"numpy": Version("1.20.0")}
    assert any("numpy>=1.26" in p and "the lock has 1.20.0" in p for p in lockfile.range_problems(moved))
    del moved["jinja2"]
    assert any("jinja2" in p and "not in the lock" in p for p in lockfile.range_problems(moved))


def test_read_lock_refuses_a_line_that_is_not_a_pin(tmp_path):
    bad = tmp_path / "lock.txt"
    bad.write_text("# comment\nnumpy==2.0.0\nscipy>=1\n")
    with pytest.raises(ValueError, match=r"lock.txt:3: 'scipy>=1' is not a 'name==version' pin"):
        lockfile.read_lock(bad)


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="judges the environment scripts/setup.sh made (.venv), not this one")
def test_setup_installed_exactly_the_lock(pins):
    assert lockfile.env_problems(pins) == []
    moved = dict(pins) | {"numpy": Version("1.0.0")}
    assert [p for p in lockfile.env_problems(moved) if p.startswith("numpy ")] == [
        f"numpy {pins['numpy']} is installed; the lock has 1.0.0"]
