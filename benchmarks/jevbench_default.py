"""jevbench's customer-support domain against a served model (#33): coherence scores by readout.

jevbench (PyPI, pinned in the test extra) runs unchanged through its own API against
``POST {url}/v1/systemone``; this script only picks the slice, the readouts and where the scores go.
Each readout is one full jevbench run on the same server:

- ``default``: the request as jevbench sends it (the server's ``--debias`` default applies);
- ``canonical``: the same requests with ``"debias": "canonical"`` added (docs/METHOD.md §6a: a
  choice's options shown in an order fixed by the option set; one prompt, as ``default``);
- ``rotate``: the same requests with ``"debias": "rotate"`` added (each choice answer averaged over
  rotations of that order; a score's over both directions), sent through ``jevbench.from_callable``.

The default slice is jevbench-240's ``customer_support`` domain: 20 cases, every relation, 860
requests per readout (hours on the 1.5B default model on 2 cores: run it on an idle machine, or
narrow it with ``--relations`` / ``--dimensions``). ``--suite examples`` is jevbench's one
hand-written customer-support case (43 requests, each relation scored from one test: a demo, not
a result). Serve the model on this machine (loopback): ``machine`` records this CPU and its load.

    typed-decisions serve --model default --port 8000 &          # the 1.5B default model
    python -m benchmarks.jevbench_default --url http://127.0.0.1:8000 --readouts default,rotate
    # -> benchmarks/results/jevbench/<model>-<cpuclass>-<date>.json

    python -m benchmarks.jevbench_default --url http://127.0.0.1:8000 --suite examples   # minutes on tiny

The result file (``harness.write_result``): ``{"schema": 1, "tool": "jevbench", "command", "git",
"machine", "model", "results": {"model", "jevbench", "suite", "domains", "relations", "readouts":
{name: {"overall", "dimensions", "groups", "relations", "graded", "mean_repeat_noise", "requests",
"seconds", "errors"}}}}``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import harness

TOOL = "jevbench"
READOUTS = ("default", "canonical", "rotate")


def served_model(url: str, key: str | None) -> str:
    """The served model's name (the first entry of GET /v1/models)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.get(url + "/v1/models", headers=headers, timeout=30)
    r.raise_for_status()
    return r.json()["models"][0]["name"]


def backend(url: str, model: str, readout: str, key: str | None, timeout: float) -> Any:
    """A jevbench model for one readout: its own HTTP backend for ``default``; for ``rotate``, a
    function posting the same request with ``"debias": "rotate"`` (named, so its cache entries
    never mix with the default's)."""
    import jevbench as jb

    if readout == "default":
        return jb.systemone(url + "/v1/systemone", model=model, api_key=key, timeout=timeout)
    client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"} if key else {})

    def ask(state: Any, questions: dict[str, Any]) -> dict[str, Any]:
        r = client.post(url + "/v1/systemone",
                        json={"model": model, "state": state, "questions": questions, "debias": readout})
        r.raise_for_status()
        return r.json()["answers"]

    return jb.from_callable(ask, name=f"{model}@{url}+debias={readout}")


def run_readout(model_backend: Any, args: argparse.Namespace) -> dict[str, Any]:
    import jevbench as jb

    t0 = time.perf_counter()
    domains = [d for d in args.domains.split(",") if d] or None
    rep = jb.evaluate(model_backend, suite=args.suite, domains=domains,
                      relations=[r for r in args.relations.split(",") if r] or None,
                      dimensions=[d for d in args.dimensions.split(",") if d] or None,
                      cache=args.cache or ":memory:", concurrency=1, progress=True)
    s = rep.scores
    return {"overall": s["overall"], "dimensions": s["pillars"], "groups": s["groups"],
            "relations": s["relations"], "graded": s["graded"], "mean_repeat_noise": s.get("mean_repeat_noise"),
            "not_scored": s["excluded"], "incomplete": s.get("incomplete"), "cases": s["n_cases"],
            "requests": rep.result["requests"], "seconds": round(time.perf_counter() - t0, 1),
            "errors": len(rep.errors), "outcomes": outcome_summary(rep.result["outcomes"], question_types(args.suite)),
            "table": rep.table("relation").splitlines()}


@functools.cache
def question_types(suite: str) -> dict[tuple[str, str], str]:
    """(case id, question key) -> question type, for a bundled suite's cases ({} for others)."""
    import jevbench as jb

    try:
        cases = jb.load_suite(suite).cases
    except Exception:  # a suite directory or name jevbench cannot load here: no split by type
        return {}
    return {(c.id, k): q["type"] for c in cases for k, q in c.questions.items()}


def outcome_summary(outcomes: list[dict[str, Any]], types: dict[tuple[str, str], str],
                    tolerance: float = 0.05) -> dict[str, dict[str, Any]]:
    """Per relation, and per type of the question it targets: the checks, their mean deviation
    (e.g. total variation), the share beyond jevbench's fixed tolerance and the argmax flips, from
    jevbench's raw outcomes."""
    def summary(os_: list[dict[str, Any]]) -> dict[str, Any]:
        dev = [float(o["deviation"]) for o in os_]
        flips = [bool(o["flip"]) for o in os_ if o.get("flip") is not None]
        return {"checks": len(os_), "mean_deviation": round(sum(dev) / len(dev), 4),
                "beyond_tolerance": round(sum(d > tolerance for d in dev) / len(dev), 4),
                "flips": round(sum(flips) / len(flips), 4) if flips else None}

    by: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        by.setdefault(o["relation"], []).append(o)
    out = {}
    for rel, os_ in sorted(by.items()):
        kinds: dict[str, list[dict[str, Any]]] = {}
        for o in os_:
            targets = list(o.get("targets") or [])
            kinds.setdefault(types.get((o["case_id"], targets[0]), "?") if targets else "?", []).append(o)
        out[rel] = {**summary(os_), "by_type": {k: summary(v) for k, v in sorted(kinds.items())}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="model name to send (default: the first name GET /v1/models lists)")
    p.add_argument("--key-env", default="TYPED_DECISIONS_API_KEY", help="environment variable holding the key")
    p.add_argument("--suite", default="jevbench-240",
                   help="jevbench suite (default jevbench-240; 'examples': the demo)")
    p.add_argument("--domains", default="customer_support", help="comma-separated jevbench domains")
    p.add_argument("--relations", default="", help="comma-separated relations (default: every scored one)")
    p.add_argument("--dimensions", default="", help="comma-separated dimensions (REP,BAT,MEA,LOG,CHO)")
    p.add_argument("--readouts", default="default,rotate", help=f"comma-separated, of {', '.join(READOUTS)}")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per request (255-option tests are slow on CPU)")
    p.add_argument("--cache", help="jevbench's request cache directory (default: this run only)")
    p.add_argument("--out", type=Path,
                   help="result file (default benchmarks/results/jevbench/<model>-<cpuclass>-<date>.json)")
    args = p.parse_args(argv)

    import jevbench as jb

    load_start = os.getloadavg()
    url = args.url.rstrip("/")
    key = os.environ.get(args.key_env) or None
    name = served_model(url, key)
    model = args.model or name
    readouts = [r for r in args.readouts.split(",") if r]
    unknown = sorted(set(readouts) - set(READOUTS))
    if unknown:
        p.error(f"unknown readouts {unknown}; known: {', '.join(READOUTS)}")
    results: dict[str, Any] = {"model": name, "url": url, "jevbench": jb.__version__, "suite": args.suite,
                               "domains": [d for d in args.domains.split(",") if d],
                               "relations": args.relations or "all", "dimensions": args.dimensions or "all",
                               "readouts": {}}
    for readout in readouts:
        print(f"jevbench {jb.__version__}: {args.suite} {results['domains']} on {name}, readout {readout}",
              file=sys.stderr, flush=True)
        results["readouts"][readout] = got = run_readout(backend(url, model, readout, key, args.timeout), args)
        print("\n".join(got["table"]), file=sys.stderr, flush=True)
    out = harness.write_result(TOOL, name, results, out=args.out, load_avg_start=load_start,
                               command=harness.command("benchmarks.jevbench_default"))
    summary = {r: {"overall": v["overall"], **v["dimensions"]} for r, v in results["readouts"].items()}
    print(json.dumps({"out": str(out), "scores": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
