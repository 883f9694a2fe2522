"""Ray Serve batching: the server's micro-batcher in the ingress vs ``@serve.batch`` in the Decider
replica (``build_app(..., batching="micro" | "serve")``), one workload, one local Ray cluster.

Both applications run side by side on ONE ``ray.init(num_cpus=2)`` cluster (1 Decider replica × 1
CPU each, so both fit; the idle one costs no CPU), with the same server settings (``max_batch`` 8,
``max_wait_ms`` 5: ``@serve.batch`` gets ``max_batch_size`` 8 and ``batch_wait_timeout_s`` 0.005).
Trials are interleaved (micro, serve, then serve, micro, ...) because the cores are shared with
other jobs whose load changes.

The workload of a trial: ``--requests`` POST /v1/systemone from ``--clients`` concurrent clients
(threads, one ``httpx.Client`` each), half of the requests about 4 shared states (each asked
``requests / 8`` times, with different questions), half about a state of their own; every trial
has fresh states, so every trial meets the same cache: cold states, then shared ones warm.

Measured per trial: throughput (requests / wall seconds), client latency p50 / p95, and the mean
batch: requests per ``Decider.run_many`` call on the replica (``/metrics``:
``typed_decisions_replica_run_many_requests_total`` / ``..._calls_total``); for ``micro`` also the
ingress's batch (``typed_decisions_batch_requests``), which the ingress splits by state before it
reaches the replica. Every answer is compared with ``Decider.run`` of the same request in this
process; the run fails (exit 1) when any probability differs by more than ``--max-dp`` (1e-5).

    python -m benchmarks.studies.ray_serve_batching --trials 3   # results/ray_serve_batching/<model>-<cpuclass>-<date>.json
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks import harness
from benchmarks.studies import ray_cluster
from benchmarks.studies.ray_label import default_model

KEY = "sk-bench"
MODES = ("micro", "serve")
QUESTIONS = [
    {"team": {"type": "choice", "instructions": "Which team should handle this?",
              "criteria": {"billing": "Payments, refunds", "tech": "Bugs, outages", "sales": "Plans"}}},
    {"urgent": {"type": "noul", "instructions": "Is it urgent?"}},
    {"severity": {"type": "score", "criteria": ["low", "medium", "high"]}},
    {"refund": {"type": "noul", "instructions": "Does the customer ask for money back?"}},
]


def workload(trial: int, n: int) -> list[dict[str, Any]]:
    """``n`` requests: even ones about 4 shared states, odd ones about a state of their own."""
    shared = [f"Trial {trial}, account {k}: the customer writes that order #{5000 + k} arrived "
              f"late and the invoice shows a different amount than the checkout page. " * 3
              for k in range(4)]
    out = []
    for i in range(n):
        state = (shared[(i // 2) % 4] if i % 2 == 0 else
                 f"Trial {trial}, ticket {i}: customer {i * 7919 % 10007} cannot log in since the "
                 f"update of the app on device #{i * 31}. " * 2)
        out.append({"model": "jev-latest", "state": state, "questions": QUESTIONS[i % len(QUESTIONS)]})
    return out


def probabilities(answers: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {n: a.get("probabilities") or {"yes": a["noul"]} for n, a in answers.items()}


def max_abs_diff(got: dict[str, Any], want: dict[str, Any]) -> float:
    g, w = probabilities(got), probabilities(want)
    assert g.keys() == w.keys(), (g.keys(), w.keys())
    return max(abs(g[q][o] - w[q][o]) for q in w for o in w[q])


def counters(url: str) -> dict[str, float]:
    """Summed replica run_many calls / requests, and the ingress's batch histogram, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {KEY}"}, timeout=30).text
    out = {"calls": 0.0, "requests": 0.0, "ingress_batches": 0.0, "ingress_batched": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "typed_decisions_replica_run_many_calls_total":
                out["calls"] += s.value
            elif s.name == "typed_decisions_replica_run_many_requests_total":
                out["requests"] += s.value
            elif s.name == "typed_decisions_batch_requests_count":
                out["ingress_batches"] += s.value
            elif s.name == "typed_decisions_batch_requests_sum":
                out["ingress_batched"] += s.value
    return out


def percentile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


def run_trial(url: str, requests: list[dict[str, Any]], clients: int) -> tuple[float, list[float], list[Any]]:
    """All requests from ``clients`` threads; (wall seconds, latencies, answers in order)."""
    pool = [httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=120) for _ in range(clients)]

    def one(i: int) -> tuple[float, Any]:
        t0 = time.perf_counter()
        r = pool[i % clients].post(url + "/v1/systemone", json=requests[i])
        seconds = time.perf_counter() - t0
        if r.status_code != 200:
            raise SystemExit(f"request {i}: HTTP {r.status_code}: {r.text[:300]}")
        return seconds, r.json()["answers"]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        done = list(ex.map(one, range(len(requests))))
    wall = time.perf_counter() - t0
    for c in pool:
        c.close()
    return wall, [d[0] for d in done], [d[1] for d in done]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None, help="export directory (default: the tiny test export)")
    p.add_argument("--requests", type=int, default=96, help="requests per trial (default 96)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    p.add_argument("--trials", type=int, default=3, help="trials per mode, interleaved (default 3)")
    p.add_argument("--max-dp", type=float, default=1e-5, help="fail above this answer difference")
    p.add_argument("--load-note", default="", help="what else ran on the machine (recorded)")
    p.add_argument("--out", type=Path, default=None, help="result file (default: harness.result_path)")
    args = p.parse_args()
    model = str((args.model or default_model()).resolve())

    from typed_decisions.cpu import describe
    from typed_decisions.decider import Decider

    oracle = Decider.load(model, threads=1)
    trials = [workload(t, args.requests) for t in range(args.trials)]
    want = [[oracle.run(r).model_dump(mode="json")["answers"] for r in reqs] for reqs in trials]
    warm = [{**r, "state": "warm-up " + r["state"]} for r in workload(99, 2 * args.clients)]

    import ray
    from ray import serve
    from ray_typed_decisions import build_app

    load_before = list(os.getloadavg())
    ray_cluster.start(2)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = {"api_keys": {KEY: "bench"}, "key_max_concurrent": 4 * args.clients}
    urls = {}
    for mode in MODES:
        serve.run(build_app(model, num_replicas=1, num_cpus_per_replica=1, batching=mode,
                            settings=settings), name=f"td-{mode}", route_prefix=f"/{mode}")
        urls[mode] = f"http://127.0.0.1:{port}/{mode}"
        run_trial(urls[mode], warm, args.clients)  # the first requests pay for Ray's start-up

    per_trial: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    latencies: dict[str, list[float]] = {m: [] for m in MODES}
    worst = {m: 0.0 for m in MODES}
    for t, reqs in enumerate(trials):
        for mode in (MODES if t % 2 == 0 else MODES[::-1]):
            before = counters(urls[mode])
            wall, lat, got = run_trial(urls[mode], reqs, args.clients)
            after = counters(urls[mode])
            d = {k: after[k] - before[k] for k in after}
            dp = max(max_abs_diff(g, w) for g, w in zip(got, want[t]))
            worst[mode] = max(worst[mode], dp)
            row = {"trial": t, "seconds": wall, "requests_per_s": len(reqs) / wall,
                   "p50_ms": 1000 * statistics.median(lat), "p95_ms": 1000 * percentile(lat, 95),
                   "mean_replica_batch": d["requests"] / d["calls"], "run_many_calls": d["calls"],
                   "max_abs_dp": dp, "load_1min": os.getloadavg()[0]}
            if d["ingress_batches"]:
                row["mean_ingress_batch"] = d["ingress_batched"] / d["ingress_batches"]
            per_trial[mode].append(row)
            latencies[mode] += lat
            print(f"trial {t} {mode:5s} {row['requests_per_s']:7.2f} req/s  p50 {row['p50_ms']:6.0f} ms  "
                  f"p95 {row['p95_ms']:6.0f} ms  batch {row['mean_replica_batch']:.2f}  "
                  f"max|dp| {dp:.1e}  load {row['load_1min']:.2f}", flush=True)
    serve.shutdown()
    ray.shutdown()

    summary = {}
    for mode in MODES:
        rows = per_trial[mode]
        summary[mode] = {
            "requests_per_s_median": statistics.median(r["requests_per_s"] for r in rows),
            "p50_ms_all": 1000 * statistics.median(latencies[mode]),
            "p95_ms_all": 1000 * percentile(latencies[mode], 95),
            "mean_replica_batch": statistics.mean(r["mean_replica_batch"] for r in rows),
            "max_abs_dp": worst[mode]}
        if "mean_ingress_batch" in rows[0]:
            summary[mode]["mean_ingress_batch"] = statistics.mean(r["mean_ingress_batch"] for r in rows)
    ratios = [s["requests_per_s"] / m["requests_per_s"] for s, m in zip(per_trial["serve"], per_trial["micro"])]
    report = {"cpu": describe(), "ray_cpus": 2, "replicas_per_app": 1, "cpus_per_replica": 1,
              "requests": args.requests, "clients": args.clients, "trials": args.trials,
              "max_batch": 8, "max_wait_ms": 5.0, "model": Path(model).name,
              "load_average_before": load_before, "load_average_after": list(os.getloadavg()),
              "load_note": args.load_note, "worker_niceness": ray_cluster.WORKER_NICENESS, "summary": summary,
              "throughput_ratio_serve_over_micro_per_trial": ratios,
              "throughput_ratio_serve_over_micro_median": statistics.median(ratios),
              "trials_detail": per_trial}
    print(f"{'mode':6s} {'req/s':>7s} {'p50 ms':>7s} {'p95 ms':>7s} {'batch':>6s}  (CPU: {describe()})")
    for mode, s in summary.items():
        print(f"{mode:6s} {s['requests_per_s_median']:7.2f} {s['p50_ms_all']:7.0f} {s['p95_ms_all']:7.0f} "
              f"{s['mean_replica_batch']:6.2f}")
    print(f"throughput serve / micro: {statistics.median(ratios):.3f} (per trial {[round(r, 3) for r in ratios]})")
    harness.write_result("ray_serve_batching", Path(model).name, report, out=args.out, load_avg_start=tuple(load_before),
                         command=harness.command("benchmarks.studies.ray_serve_batching"))
    bad = {m: w for m, w in worst.items() if not w <= args.max_dp}
    if bad:
        print(f"FAIL: answers differ from Decider.run by more than {args.max_dp}: {bad}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
