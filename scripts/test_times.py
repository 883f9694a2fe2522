"""Where a test run's time went, from pytest's JUnit XML (`pytest --junitxml=FILE`).

    python scripts/test_times.py FILE [--bound SECONDS] [--top N]

Prints the seconds per test module (setup and teardown included, so a module that builds a shared
fixture first carries its cost), slowest first, then every test over the bound (default 60 s). A
report, not a test: times on shared CPUs move, so nothing here fails a run (exit status 0 unless the
file cannot be read); `.ci/run` prints it after the tests.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def module_of(classname: str) -> str:
    """pytest's JUnit classname is the dotted module, with the test class appended for methods:
    `tests.test_server` or `tests.test_server.TestLimits` → `tests.test_server`."""
    head, _, last = classname.rpartition(".")
    return head if head and last[:1].isupper() else classname


def read_cases(path: str) -> list[tuple[str, str, float]]:
    """(module, test name, seconds) for every test case of the file."""
    root = ET.parse(path).getroot()
    return [(module_of(case.get("classname", "")), case.get("name", ""), float(case.get("time", 0.0)))
            for case in root.iter("testcase")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit_xml")
    ap.add_argument("--bound", type=float, default=60.0, help="list the tests slower than this (s)")
    ap.add_argument("--top", type=int, default=25, help="modules to print (0: all)")
    args = ap.parse_args(argv)
    try:
        cases = read_cases(args.junit_xml)
    except (OSError, ET.ParseError) as e:
        print(f"test_times: cannot read {args.junit_xml}: {e}", file=sys.stderr)
        return 2
    per_module: dict[str, list[float]] = defaultdict(list)
    for module, _, s in cases:
        per_module[module].append(s)
    total = sum(s for *_, s in cases)
    modules = sorted(per_module.items(), key=lambda kv: -sum(kv[1]))
    print(f"test time by module ({len(cases)} tests, {total:.0f} s in tests):")
    for module, times in modules[: args.top or None]:
        print(f"  {sum(times):8.1f} s  {100 * sum(times) / max(total, 1e-9):5.1f} %  {len(times):4d} tests  {module}")
    if args.top and len(modules) > args.top:
        rest = sum(sum(t) for _, t in modules[args.top:])
        print(f"  {rest:8.1f} s  {100 * rest / max(total, 1e-9):5.1f} %  ({len(modules) - args.top} more modules)")
    slow = sorted(((s, m, n) for m, n, s in cases if s > args.bound), reverse=True)
    print(f"tests over {args.bound:g} s: {len(slow)}")
    for s, module, name in slow:
        print(f"  {s:8.1f} s  {module}::{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
