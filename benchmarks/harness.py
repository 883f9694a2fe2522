"""What every benchmark shares: the machine record, timing, interleaving, the common arguments and
the one result writer.

A result file is ``{"schema": 1, "tool", "command", "git", "machine", "model", "results", ...}``
at ``benchmarks/results/<tool>/<model>-<cpuclass>-<date>.json`` (``result_path``), written by
``write_result``; ``"machine"`` is ``typed_decisions.cpu.describe()`` (class, model, ISA flags)
plus the usable cores and the 1-minute load average at the start and the end of the run: every
number of the file depends on them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from typed_decisions.cpu import cpu_class, describe, usable_cores

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = 1
REQUIRED_KEYS = ("schema", "tool", "command", "git", "machine", "results")

# --------------------------------------------------------------------------- the record


def machine(load_avg_start: tuple[float, ...] | None = None) -> dict[str, Any]:
    """The CPU (``cpu.describe()``), the cores this process may use, the load average (start, end).

    >>> m = machine((1.0, 1.0, 1.0)); sorted(m) == ['class', 'flags', 'load_avg_end', 'load_avg_start', 'model',
    ...                                              'usable_cores'] or 'forced_by' in m
    True
    """
    return {**describe(), "usable_cores": usable_cores(),
            "load_avg_start": list(load_avg_start) if load_avg_start is not None else None,
            "load_avg_end": list(os.getloadavg())}


def git_commit() -> str | None:
    """HEAD of the repository the benchmark runs from, ``+dirty`` when tracked files changed; None
    outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def command(module: str, argv: list[str] | None = None) -> str:
    """The command line that reproduces this run, as typed from the repository root.

    >>> command("benchmarks.bench", ["--model", "tiny", "--out", "a b.json"])
    "python -m benchmarks.bench --model tiny --out 'a b.json'"
    """
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def result_path(tool: str, model: str, date: _dt.date | None = None, cls: str | None = None) -> Path:
    """``results/<tool>/<model>-<cpuclass>-<date>.json``.

    >>> result_path("bench", "smollm2-135m", _dt.date(2026, 12, 4), "avx2").relative_to(RESULTS).as_posix()
    'bench/smollm2-135m-avx2-2026-12-04.json'
    """
    return RESULTS / tool / f"{model}-{cls or cpu_class()}-{(date or _dt.date.today()).isoformat()}.json"


def result_document(tool: str, model: str | None, results: Any, *, command: str,
                    load_avg_start: tuple[float, ...] | None = None, **extra: Any) -> dict[str, Any]:
    """The schema-1 document (``extra`` keys sit beside ``results``: a note, a partial flag)."""
    return {"schema": SCHEMA, "tool": tool, "command": command, "git": git_commit(),
            "machine": machine(load_avg_start), "model": model, **extra, "results": results}


def write_result(tool: str, model: str | None, results: Any, *, command: str, out: Path | None = None,
                 load_avg_start: tuple[float, ...] | None = None, **extra: Any) -> Path:
    """Write the schema-1 document to ``out`` (default ``result_path(tool, model)``); returns the path."""
    path = out if out is not None else result_path(tool, model or "unknown")
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = result_document(tool, model, results, command=command, load_avg_start=load_avg_start, **extra)
    path.write_text(json.dumps(doc, indent=1, default=_plain) + "\n", encoding="utf-8")
    return path


def problems(doc: Any) -> list[str]:
    """What keeps ``doc`` from being a schema-1 result (empty: it is one).

    >>> problems({"schema": 1, "tool": "t", "command": None, "git": None, "machine": None, "results": {}})
    []
    >>> problems({"results": []})
    ['schema is None, not 1', 'missing tool', 'missing command', 'missing git', 'missing machine']
    """
    if not isinstance(doc, dict):
        return [f"a {type(doc).__name__}, not an object"]
    out = [] if doc.get("schema") == SCHEMA else [f"schema is {doc.get('schema')!r}, not {SCHEMA}"]
    out += [f"missing {k}" for k in REQUIRED_KEYS if k not in doc and k != "schema"]
    return out


def read_results(path: Path) -> Any:
    """The ``results`` of a schema-1 file; a file written before the schema is returned whole.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "r.json"
    >>> _ = f.write_text('{"schema": 1, "tool": "t", "command": "", "git": null, "machine": {}, "results": [1]}')
    >>> read_results(f)
    [1]
    >>> _ = f.write_text('{"a/letters": {}}'); read_results(f)
    {'a/letters': {}}
    """
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return doc["results"] if isinstance(doc, dict) and doc.get("schema") == SCHEMA and "results" in doc else doc


def _plain(x: Any) -> Any:
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON: {type(x).__name__}")


# --------------------------------------------------------------------------- arguments


def common_args(p: argparse.ArgumentParser, *, threads: int | None = 2, out: bool = True) -> argparse.ArgumentParser:
    """``--threads`` (ONNX Runtime intra-op threads; None: the engine's default, the usable cores)
    and ``--out`` (default: ``result_path``)."""
    p.add_argument("--threads", type=int, default=threads,
                   help=f"ONNX Runtime threads (default {threads if threads else 'the usable cores'})")
    if out:
        p.add_argument("--out", type=Path, default=None,
                       help="result file (default benchmarks/results/<tool>/<model>-<cpuclass>-<date>.json)")
    return p


def datasets_or_exit(names: str | list[str]) -> list[str]:
    """The dev-bench sets named (comma-separated or a list), each fetched (once, cached) before a
    long run starts: a set that cannot be had here (an unknown name; bigbench==1.0.0, which the
    index no longer serves: docs/evaluation.md "Datasets") ends the run now with the reason, not
    after an hour of reading the sets before it."""
    from typed_decisions.errors import TypedDecisionsError
    from typed_decisions.evaluation.datasets import fetch, get_spec

    sets = [n for n in (names.split(",") if isinstance(names, str) else names) if n]
    for name in sets:
        try:
            fetch(get_spec(name).file)
        except TypedDecisionsError as e:
            others = ",".join(n for n in sets if n != name)
            raise SystemExit(f"dataset {name!r}: {type(e).__name__}: {e}\n(run without it: --datasets {others})")
    return sets


def cycled(pool: list[str], n: int) -> list[str]:
    """The first ``n`` items of ``pool`` repeated.

    >>> cycled(["a", "b", "c"], 5)
    ['a', 'b', 'c', 'a', 'b']
    """
    return (pool * (1 + n // len(pool)))[:n]


class StatesStudy(NamedTuple):
    """What ``states_study`` set up: the arguments, the loaded export, the states to ask about and
    the load average before loading (``write_result``'s ``load_avg_start``)."""

    args: argparse.Namespace
    decider: Any  # typed_decisions.decider.Decider
    states: list[str]
    load_avg_start: tuple[float, ...]


def states_study(doc: str, argv: list[str] | None, pool: list[str], questions: dict[str, Any]) -> StatesStudy:
    """The start of a study that times one request shape about ``--states`` distinct states
    (studies/levers_cost.py, studies/fewshot_cost.py): parse ``--model``, ``--states`` (default
    8) and ``common_args`` (the description: ``doc``'s first paragraph), note the load average,
    load the export with ``--threads``, and answer one untimed warm-up request with ``questions``
    (the session's first run; the chat head cached). The states are ``pool`` cycled to
    ``--states``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--states", type=int, default=8)
    args = common_args(p).parse_args(argv)
    load_start = os.getloadavg()
    from typed_decisions.decider import Decider  # here: the rest of the harness loads no model

    d = Decider.load(args.model, threads=args.threads)
    d.run({"model": d.name, "state": "warm up", "questions": questions})
    return StatesStudy(args, d, cycled(pool, args.states), load_start)


# --------------------------------------------------------------------------- timing


def time_v(cmd: list[str], log: Path, *, watch: Callable[[subprocess.Popen], None] | None = None,
           interval: float = 2.0, check: bool = True) -> dict[str, Any]:
    """Run ``cmd`` under ``/usr/bin/time -v`` (its output and the report saved to ``log``): wall
    seconds, peak RSS bytes, user and system CPU seconds, the CPU percent time -v reports and the
    exit status. A failing command stops the benchmark with its log's tail, unless ``check=False``.

    ``watch(proc)`` runs every ``interval`` seconds while the command runs (``stop(proc)`` ends the
    command and leaves time -v its report); the output then streams into ``log`` as it comes, so the
    log can be followed."""
    full = ["/usr/bin/time", "-v", *cmd]
    if watch is None:
        done = subprocess.run(full, capture_output=True, text=True, check=False)
        log.write_text(done.stdout + done.stderr)
        returncode = done.returncode
    else:
        with open(log, "w") as f:
            proc = subprocess.Popen(full, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            while proc.poll() is None:
                watch(proc)
                try:
                    proc.wait(timeout=interval)
                except subprocess.TimeoutExpired:
                    pass
        returncode = proc.returncode
    text = log.read_text(errors="replace")
    if returncode and check:
        raise SystemExit(f"{' '.join(cmd[:3])} failed, see {log}:\n{text[-2000:]}")
    return {**time_report(text), "returncode": returncode}


def stop(proc: subprocess.Popen) -> None:
    """Kill everything below ``/usr/bin/time`` (``proc``, under ``time_v``'s ``watch``), not time
    itself, so that it still writes its report (``Command terminated by signal 9``)."""
    below, stack = [], [proc.pid]
    while stack:
        pid = stack.pop()
        try:
            children = [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
        except OSError:
            continue
        below += children
        stack += children
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def time_report(text: str) -> dict[str, Any]:
    r"""The figures of a ``/usr/bin/time -v`` report (the last one in ``text``).

    >>> time_report("\tUser time (seconds): 56.19\n\tSystem time (seconds): 24.31\n\tPercent of CPU this job "
    ...             "got: 46%\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 2:52.63\n\tMaximum resident set "
    ...             "size (kbytes): 1820860\n")
    {'seconds': 172.6, 'user_seconds': 56.19, 'system_seconds': 24.31, 'cpu_percent': 46, 'peak_rss_bytes': 1864560640}
    """
    def last(pattern: str) -> str:
        return re.findall(pattern, text)[-1]

    wall = last(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)")
    seconds = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    cpu = re.findall(r"Percent of CPU this job got: (\d+)%", text)
    return {"seconds": round(seconds, 1), "user_seconds": float(last(r"User time \(seconds\): ([\d.]+)")),
            "system_seconds": float(last(r"System time \(seconds\): ([\d.]+)")),
            "cpu_percent": int(cpu[-1]) if cpu else None,
            "peak_rss_bytes": int(last(r"Maximum resident set size \(kbytes\): (\d+)")) * 1024}


def summarize(times: list[float]) -> dict[str, float]:
    """Median, p95 (linear interpolation), min of latencies in seconds.

    >>> summarize([1.0, 2.0, 3.0])["median_s"]
    2.0
    """
    a = np.asarray(times)
    return {"median_s": float(np.median(a)), "p95_s": float(np.percentile(a, 95)), "min_s": float(a.min()),
            "trials": len(times)}


def timed(fn: Callable[[], Any], trials: int, desc: str, before: Callable[[], Any] | None = None,
          warmup: int = 1) -> tuple[list[float], Any]:
    """Run ``fn`` ``warmup`` times untimed, then ``trials`` timed; ``before`` runs untimed each time.

    >>> times, out = timed(lambda: 7, trials=3, desc="x", warmup=0); len(times), out
    (3, 7)
    """
    out = None
    for _ in range(warmup):
        if before:
            before()
        out = fn()
    times = []
    for _ in _progress(range(trials), desc):
        if before:
            before()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, before: dict[str, Callable[[], Any]] | None = None,
                warmup: int = 1) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Time every system once per round, in turn, the order reversed every other round; ``before[s]``
    runs untimed before each call of ``s``. A machine whose speed drifts during a run (by ~30 % within
    minutes on one of this project's machines) then slows every system alike, and round i compares
    calls made seconds apart. Returns (times per system, each system's last output).

    >>> calls = []
    >>> times, _ = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3, warmup=0)
    >>> calls, [len(t) for t in times.values()]
    (['a', 'b', 'b', 'a', 'a', 'b'], [3, 3])
    """
    before = before or {}
    names = list(fns)
    out: dict[str, Any] = {}
    for _ in range(warmup):
        for name in names:
            if name in before:
                before[name]()
            out[name] = fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in _progress(range(rounds), "interleaved " + " / ".join(names)):
        for name in (names if r % 2 == 0 else names[::-1]):
            if name in before:
                before[name]()
            t0 = time.perf_counter()
            out[name] = fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times, out


def round_ratios(peer: list[float], ours: list[float]) -> list[float]:
    """Per round, the peer's time over ours (> 1: ours faster).

    >>> round_ratios([2.0, 3.0, 4.5], [1.0, 2.0, 3.0])
    [2.0, 1.5, 1.5]
    """
    if len(peer) != len(ours):
        raise ValueError(f"{len(peer)} peer rounds vs {len(ours)} of ours")
    return [p / o for p, o in zip(peer, ours)]


def _progress(it: Any, desc: str) -> Any:
    """tqdm on stderr when it is installed (a progress bar, never a result)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return it
    return tqdm(it, desc=desc, leave=False, file=sys.stderr)


class RssSampler:
    """Peak resident memory per phase, sampled every 10 ms from /proc/self/statm.

    >>> s = RssSampler(); s.phase("x"); s.stop(); s.peaks["x"] > 0
    True
    """

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.current = "setup"
        self.peaks: dict[str, int] = defaultdict(int)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _loop(self) -> None:
        while not self._stop.wait(0.01):
            r = self.rss()
            self.peaks[self.current] = max(self.peaks[self.current], r)

    def phase(self, name: str) -> None:
        self.current = name
        self.peaks[name] = max(self.peaks[name], self.rss())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
