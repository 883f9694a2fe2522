"""Load benchmark of ``typed-decisions serve``: concurrent clients, answers checked, with and without
micro-batching.

Not a test (nothing here is timed against a threshold); ``tests/test_server.py`` holds the
correctness tests. For each server configuration (``--max-batch 8 --max-wait-ms 5``, then
``--max-batch 1``) this script:

1. starts ``typed-decisions serve`` in a subprocess on 127.0.0.1 and a free port, waits for
   ``/readyz``;
2. sends a fixed set of 20 distinct requests (a 3-option choice + a noul + a 3-level score about
   varied support tickets) one at a time: their answers are the *sequential answers*;
3. runs ``--clients`` threads (default 16), each sending ``--requests`` requests (default 200)
   over its own keep-alive connection, client ``i`` sending request ``(i + j) mod 20`` as its
   ``j``-th; every answer must equal its sequential answer (numbers within ``--atol``, 1e-5;
   strings, types and token counts exactly), every status must be 200;
4. reads the server's ``/metrics`` (requests per engine call) and stops it with SIGTERM.

Latency is per request, client side (send to full body). Throughput = requests / wall time of
step 3. The 1-minute load average is recorded before and after each run: on a shared machine
it says how much of the numbers belongs to other jobs.

    python -m benchmarks.load                                  # the tiny test export, 16 × 200
    python -m benchmarks.load --model DIR --clients 16 --requests 20

The last line printed is one JSON object; it is also written (``--out``, default
``benchmarks/results/load/<model>-<cpuclass>-<date>.json``, harness.py's schema). Only loopback
traffic.

``benchmarks/bench.py``'s workload W5 reuses this module: ``Server`` (the subprocess, always
stopped), ``concurrent_clients`` (the clients and the comparison of every answer) and ``summary``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks import harness

EXPORTS = Path.home() / ".cache" / "typed-decisions" / "exports"

TICKETS = [
    "I was charged twice for my subscription this month. Please refund one payment.",
    "The app crashes every time I open the settings page on Android.",
    "Can I upgrade from the basic plan to the team plan mid-cycle?",
    "Your website has been down for an hour and none of our staff can log in.",
    "I need an invoice with our VAT number for last quarter's payments.",
    "The export button produces an empty CSV file since yesterday's update.",
    "What discounts do you offer for non-profit organisations?",
    "My card was declined but the money left my account anyway.",
    "Search results load very slowly, about thirty seconds per query.",
    "We'd like a quote for 500 seats with single sign-on.",
    "Please cancel my account and delete all my data.",
    "The API returns error 500 for every request with a date filter.",
    "Is there a yearly plan, and how much cheaper is it than monthly?",
    "I was billed after I cancelled my trial. I want my money back.",
    "Notifications stopped arriving on my phone after the last release.",
    "Our sales team wants a demo of the enterprise features next week.",
    "The password reset email never arrives.",
    "Why did my monthly price go up without any notice?",
    "Data from our integration has been duplicated in every report.",
    "Thank you, the issue from last week is fully resolved now.",
]

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing": "Payments, refunds, invoices", "tech": "Bugs, outages, errors",
                          "sales": "Plans, upgrades, quotes"}},
    "urgent": {"type": "noul", "instructions": "Is this ticket urgent?"},
    "severity": {"type": "score", "instructions": "How severe is the customer's problem?",
                 "criteria": ["low", "medium", "high"]},
}


def requests_set(model: str) -> list[dict[str, Any]]:
    """The 20 distinct requests every run cycles through (same questions, different states)."""
    return [{"model": model, "state": t, "questions": QUESTIONS} for t in TICKETS]


def differences(got: Any, want: Any, atol: float, path: str = "") -> list[str]:
    """Where two JSON answers differ: numbers beyond ``atol``, anything else at all.

    >>> differences({"p": {"a": 0.5, "b": 0.5}, "t": "choice"}, {"p": {"a": 0.5000001, "b": 0.5}, "t": "choice"}, 1e-5)
    []
    >>> differences({"p": 0.5, "t": "a"}, {"p": 0.6, "t": "b"}, 1e-5)
    ['.p: 0.5 vs 0.6', ".t: 'a' vs 'b'"]
    """
    num = (int, float)
    if isinstance(got, num) and isinstance(want, num) and not isinstance(got, bool) and type(got) is type(want):
        return [] if abs(got - want) <= atol else [f"{path}: {got} vs {want}"]
    if isinstance(got, dict) and isinstance(want, dict):
        if set(got) != set(want):
            return [f"{path}: keys {sorted(got)} vs {sorted(want)}"]
        return [d for k in sorted(want) for d in differences(got[k], want[k], atol, f"{path}.{k}")]
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, atol, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: {got!r} vs {want!r}"]


def max_abs_difference(got: Any, want: Any) -> float:
    """Largest |got - want| over the numbers of two same-shaped JSON values (0.0 if none)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return max((max_abs_difference(got[k], want[k]) for k in want if k in got), default=0.0)
    if isinstance(got, list) and isinstance(want, list):
        return max((max_abs_difference(g, w) for g, w in zip(got, want)), default=0.0)
    if isinstance(got, (int, float)) and isinstance(want, (int, float)) and not isinstance(got, bool):
        return abs(float(got) - float(want))
    return 0.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``q`` of the values at or below it.

    >>> percentile([4, 1, 3, 2], 0.5), percentile(list(range(1, 21)), 0.95)
    (2, 19)
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HEADERS = {"Authorization": "Bearer load-benchmark"}
# (name, --max-batch, --max-wait-ms) of the two server configurations compared
CONFIGS = [("batched", 8, 5.0), ("unbatched", 1, 5.0)]


def serve_command(model: Path, port: int, threads: int, max_batch: int, max_wait_ms: float,
                  labels: str | None = None) -> list[str]:
    exe = Path(sys.executable).with_name("typed-decisions")
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "typed_decisions.cli"]
    return [*head, "serve", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--threads", str(threads), "--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms),
            *(["--labels", labels] if labels else []), "--log-level", "warning",
            # every client here is the one anonymous caller: lift the per-key bound (16) to the
            # queue's, so the benchmark measures the engine and the batcher, not the fairness policy
            "--key-concurrency", "64"]


def start_server(cmd: list[str], url: str, log_path: Path, timeout_s: float = 300) -> subprocess.Popen[bytes]:
    """Start ``cmd`` and wait for ``/readyz``; the process is killed if anything goes wrong meanwhile."""
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}; see {log_path}")
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"serve was not ready within {timeout_s:.0f} s; see {log_path}")
    except BaseException:  # includes KeyboardInterrupt / SystemExit: never leave a server behind
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        raise


def stop_server(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


class Server:
    """``typed-decisions serve`` in a subprocess on 127.0.0.1 and a free port, as a context manager:
    ready (``/readyz``) on entry, stopped (SIGTERM, then SIGKILL after 60 s) on exit, error or not.

    ``url``, ``cmd`` and ``log_path`` are set at construction, ``exit_code`` after the exit."""

    def __init__(self, model: Path, *, name: str, threads: int, max_batch: int, max_wait_ms: float,
                 labels: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = serve_command(model, self.port, threads, max_batch, max_wait_ms, labels)
        self.log_path = Path(tempfile.gettempdir()) / f"typed-decisions-load-{name}-{self.port}.log"
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    def __enter__(self) -> Server:
        print(f"[{self.name}] {shlex.join(self.cmd)}", file=sys.stderr, flush=True)
        self.proc = start_server(self.cmd, self.url, self.log_path)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.exit_code = stop_server(self.proc)
            self.proc = None


def batch_metrics(url: str) -> tuple[float, float]:
    """(engine calls, requests answered by them) so far, from the server's Prometheus text."""
    text = httpx.get(url + "/metrics", timeout=10).text
    value = lambda name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))  # noqa: E731
    return value("typed_decisions_batch_requests_count"), value("typed_decisions_batch_requests_sum")


def concurrent_clients(url: str, reqs: list[dict[str, Any]], expected: list[Any], schedule: list[list[int]], *,
                       atol: float, timeout_s: float) -> dict[str, Any]:
    """``len(schedule)`` client threads, client ``i`` sending ``reqs[k]`` for each ``k`` of ``schedule[i]``
    in order over its own keep-alive connection; every answer is compared with ``expected[k]``
    (``differences``: numbers within ``atol``, everything else exactly).

    Returns the raw outcome: per-request latencies (client side, send to full body, successes
    only), errors and mismatches (strings), how many bodies equal their expected answer exactly,
    the largest numeric difference, the wall time, the server's engine calls and the requests they
    answered during the phase, the 1-minute load average before and after. ``summary`` condenses it.
    """
    latency: list[float] = []
    errors: list[str] = []
    mismatches: list[str] = []
    exact = [0]
    max_diff = [0.0]
    lock = threading.Lock()
    stop = threading.Event()  # set when the caller is interrupted: clients send nothing more

    def one_client(i: int) -> None:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=timeout_s) as client:
            for j, k in enumerate(schedule[i]):
                if stop.is_set():
                    return
                t = time.perf_counter()
                try:
                    resp = client.post("/v1/systemone", json=reqs[k])
                except httpx.HTTPError as e:
                    with lock:
                        errors.append(f"client {i} request {j}: {type(e).__name__}: {e}")
                    continue
                seconds = time.perf_counter() - t
                with lock:
                    if resp.status_code != 200:
                        errors.append(f"client {i} request {j}: HTTP {resp.status_code} {resp.text[:200]}")
                        continue
                    latency.append(seconds)
                    body = resp.json()
                    diff = differences(body, expected[k], atol)
                    max_diff[0] = max(max_diff[0], max_abs_difference(body, expected[k]))
                    exact[0] += body == expected[k]
                    if diff:
                        mismatches.append(f"request {k}: {'; '.join(diff[:3])}")

    metrics_before = batch_metrics(url)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(len(schedule))
    try:
        list(pool.map(one_client, range(len(schedule))))
    except BaseException:  # e.g. SIGTERM turned into SystemExit: do not wait for the remaining requests
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    calls, answered = (after - before for after, before in zip(batch_metrics(url), metrics_before))
    return {"requests": sum(map(len, schedule)), "latency": latency, "errors": errors, "mismatches": mismatches,
            "exact": exact[0], "max_diff": max_diff[0], "wall_s": wall, "engine_calls": calls,
            "engine_answered": answered, "load_before": load_before[0], "load_after": load_after[0]}


def summary(phase: dict[str, Any]) -> dict[str, Any]:
    """The reported fields of a ``concurrent_clients`` outcome (load.py and bench.py's W5 both use it).

    ``all_equal_sequential``: every request answered 200 and within ``atol`` of its expected answer;
    ``identical``: how many bodies were exactly equal to it."""
    ok, calls = len(phase["latency"]), phase["engine_calls"]
    return {
        "requests": phase["requests"], "ok": ok, "errors": len(phase["errors"]),
        "mismatches": len(phase["mismatches"]), "identical": phase["exact"],
        "all_equal_sequential": ok == phase["requests"] and not phase["mismatches"],
        "max_abs_diff_vs_sequential": phase["max_diff"],
        "wall_s": round(phase["wall_s"], 3), "throughput_rps": round(ok / phase["wall_s"], 3),
        # engine calls of the concurrent phase only (not the self-test, not a sequential pass)
        "engine_calls": int(calls),
        "requests_per_engine_call": round(phase["engine_answered"] / calls, 2) if calls else None,
        "loadavg_1m_before": round(phase["load_before"], 2), "loadavg_1m_after": round(phase["load_after"], 2),
        "first_errors": phase["errors"][:5], "first_mismatches": phase["mismatches"][:5],
    }


def run_config(name: str, model: Path, *, threads: int, max_batch: int, max_wait_ms: float,
               clients: int, per_client: int, atol: float, timeout_s: float) -> dict[str, Any]:
    server = Server(model, name=name, threads=threads, max_batch=max_batch, max_wait_ms=max_wait_ms)
    with server:
        url = server.url
        served = httpx.get(url + "/readyz", timeout=10).json()["model"]
        reqs = requests_set(served)

        # 1. the sequential answers, one client, one request at a time
        sequential: list[dict[str, Any]] = []
        seq_latency: list[float] = []
        with httpx.Client(base_url=url, headers=HEADERS, timeout=timeout_s) as client:
            for r in reqs:
                t = time.perf_counter()
                resp = client.post("/v1/systemone", json=r)
                seq_latency.append(time.perf_counter() - t)
                resp.raise_for_status()
                sequential.append(resp.json())
        print(f"[{name}] sequential: {len(reqs)} requests, p50 {1000 * statistics.median(seq_latency):.0f} ms",
              file=sys.stderr, flush=True)

        # 2. concurrent clients, each on its own connection, client i sending request (i + j) mod 20 as its j-th
        schedule = [[(i + j) % len(reqs) for j in range(per_client)] for i in range(clients)]
        phase = concurrent_clients(url, reqs, sequential, schedule, atol=atol, timeout_s=timeout_s)
    latency = phase["latency"]
    return {
        "config": name, "max_batch": max_batch, "max_wait_ms": max_wait_ms, "threads": threads,
        "clients": clients, "requests_per_client": per_client, **summary(phase),
        "p50_ms": round(1000 * percentile(latency, 0.50), 1) if latency else None,
        "p95_ms": round(1000 * percentile(latency, 0.95), 1) if latency else None,
        "sequential_p50_ms": round(1000 * statistics.median(seq_latency), 1),
        "server_exit": server.exit_code, "sequential_answers": sequential,
    }


def default_model() -> Path:
    found = sorted(p for p in EXPORTS.glob("test-smollm2-135m-*") if "int8" not in p.name)
    if not found:
        raise SystemExit(f"no tiny export in {EXPORTS}; run the test suite once, or pass --model DIR")
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="exported model directory (default: the tiny test export)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=200, help="requests per client")
    harness.common_args(p, out=False)
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--timeout", type=float, default=600, help="per-request timeout, seconds")
    p.add_argument("--only", choices=["batched", "unbatched"], default=None)
    p.add_argument("--out", type=Path, default=None, help="result file (default: harness.result_path)")
    args = p.parse_args(argv)
    model = (args.model or default_model()).resolve()
    load_start = os.getloadavg()
    runs = [run_config(name, model, threads=args.threads, max_batch=b, max_wait_ms=w, clients=args.clients,
                       per_client=args.requests, atol=args.atol, timeout_s=args.timeout)
            for name, b, w in CONFIGS if args.only in (None, name)]
    # Both servers' sequential answers must agree too (batching is off for the sequential pass anyway).
    cross = max((max_abs_difference(a, b) for a, b in zip(runs[0]["sequential_answers"], runs[-1]["sequential_answers"])),
                default=0.0)
    for r in runs:
        del r["sequential_answers"]
    result = {
        "model_dir": str(model), "sequential_max_abs_diff_between_configs": cross,
        "runs": runs,
        "passed": all(r["errors"] == 0 and r["mismatches"] == 0 for r in runs),
    }
    name = json.loads((model / "manifest.json").read_text())["name"].removeprefix("test-")
    harness.write_result("load", name, result, command=harness.command("benchmarks.load", argv), out=args.out,
                         load_avg_start=load_start)
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
