"""scripts/test_times.py: per-module seconds and the tests over a bound, from pytest's JUnit XML."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("test_times", ROOT / "scripts" / "test_times.py")
test_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(test_times)

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_server" name="test_a" time="70.5"/>
<testcase classname="tests.test_server.TestLimits" name="test_b" time="2.0"/>
<testcase classname="typed_decisions.decider" name="typed_decisions.decider.Decider" time="0.5"/>
<testcase classname="tests.test_schema" name="test_c" time="10.0"/>
</testsuite></testsuites>"""


def test_modules_sum_their_tests_and_classes_fold_into_their_module(tmp_path, capsys):
    path = tmp_path / "junit.xml"
    path.write_text(XML)
    assert test_times.read_cases(str(path))[1] == ("tests.test_server", "test_b", 2.0)
    assert test_times.main([str(path), "--bound", "60"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "test time by module (4 tests, 83 s in tests):"
    assert out[1].split() == ["72.5", "s", "87.3", "%", "2", "tests", "tests.test_server"]
    assert out[2].split()[-1] == "tests.test_schema" and out[3].split()[-1] == "typed_decisions.decider"
    assert out[4:] == ["tests over 60 s: 1", "      70.5 s  tests.test_server::test_a"]


def test_an_unreadable_file_is_reported_not_raised(tmp_path, capsys):
    assert test_times.main([str(tmp_path / "missing.xml")]) == 2
    assert "cannot read" in capsys.readouterr().err
