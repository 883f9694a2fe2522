"""W5: concurrent HTTP clients against ``typed-decisions serve`` (micro-batching on, then off) and
the same requests answered one by one in-process, every HTTP answer compared with the in-process one
(``load.py``'s server, clients and comparison)."""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import harness
from benchmarks.harness import summarize
from benchmarks.workloads import w5_requests, workloads

W5_TIMEOUT_S = 600  # per HTTP request


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `with Server` blocks, which stop the servers


def run_w5(args: argparse.Namespace, export_dir: Path, dtype: str, mode: str, tok: Any, model_name: str,
           R: dict[str, Any], save: Callable[[], Any]) -> None:
    """W5: the same N = ``--w5-clients`` × ``--w5-requests`` requests (``w5_requests``) answered

    1. ``sequential``: one by one in-process (``Decider.run``; the baseline, and the expected answers);
    2. ``http_batched``: by ``--w5-clients`` concurrent clients (client ``i`` sends requests
       ``i·R … i·R + R - 1`` in order over its own keep-alive connection) against ``typed-decisions
       serve --max-batch 8 --max-wait-ms 5`` (micro-batching on, load.py's ``batched``);
    3. ``http_unbatched``: the same against ``--max-batch 1``.

    Same export, label mode and ONNX Runtime threads everywhere. Each system first answers one
    untimed W1 request (a state none of the N shares). Every HTTP answer is compared with the
    in-process one (load.py's ``differences``: numbers within ``--w5-atol``, the rest exactly).
    Each server is a subprocess on a free loopback port, stopped when its phase ends, error or not
    (a SIGTERM to this script included). Latency: per request (client side for HTTP);
    throughput: N / wall time of the phase."""
    import httpx

    # load.py: the server subprocess, the clients, the comparison
    from benchmarks import load as load_bench
    from typed_decisions.decider import Decider

    clients, per = args.w5_clients, args.w5_requests
    n = clients * per
    reqs = w5_requests(tok, model_name, n)
    warm = {**workloads(tok)["W1"], "model": model_name}  # first-run allocations, untimed; W1's state is not among reqs
    schedule = [[i * per + j for j in range(per)] for i in range(clients)]
    common = {"dtype": dtype, "mode": mode, "threads": args.threads, "clients": clients,
              "requests_per_client": per, "requests": n}
    W5 = R.setdefault("W5", {})

    dec = Decider.load(export_dir, label_mode=mode, threads=args.threads)
    dec.run(warm)
    latency, expected = [], []
    t0 = time.perf_counter()
    for r in harness._progress(reqs, f"W5 sequential {dtype} {mode}"):
        t = time.perf_counter()
        body = dec.run(r).model_dump(mode="json")
        latency.append(time.perf_counter() - t)
        expected.append(json.loads(json.dumps(body)))  # what a client decodes
    wall = time.perf_counter() - t0
    W5["sequential"] = {**summarize(latency), **common, "wall_s": round(wall, 3),
                        "throughput_rps": round(n / wall, 3)}
    print(f"W5 sequential: {n} requests in {wall:.2f} s", file=sys.stderr, flush=True)
    save()
    del dec
    gc.collect()

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main_thread else None
    try:
        for config, max_batch, max_wait_ms in load_bench.CONFIGS:
            server = load_bench.Server(export_dir, name=f"w5-{config}", threads=args.threads, max_batch=max_batch,
                                       max_wait_ms=max_wait_ms, labels=mode)
            with server:
                httpx.post(server.url + "/v1/systemone", json=warm, headers=load_bench.HEADERS,
                           timeout=W5_TIMEOUT_S).raise_for_status()
                phase = load_bench.concurrent_clients(server.url, reqs, expected, schedule, atol=args.w5_atol,
                                                      timeout_s=W5_TIMEOUT_S)
            r = load_bench.summary(phase)
            W5[f"http_{config}"] = {**(summarize(phase["latency"]) if phase["latency"] else {}), **common,
                                    "max_batch": max_batch, "max_wait_ms": max_wait_ms, **r,
                                    "server_exit": server.exit_code, "server_log": str(server.log_path)}
            print(f"W5 http_{config}: {r['ok']}/{n} ok in {r['wall_s']:.2f} s, {r['errors']} errors, "
                  f"{r['mismatches']} answers differ from sequential (max |Δ| {r['max_abs_diff_vs_sequential']:.1e}), "
                  f"{r['requests_per_engine_call']} requests per engine call", file=sys.stderr, flush=True)
            save()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
