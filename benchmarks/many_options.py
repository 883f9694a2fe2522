"""Many options: where the time of a choice with 26 / 128 / 255 options goes (#33).

jevcompat's many-option request (``workloads.queue_choice``: Billing, Queue 001, ..., each with a
description, about jevcompat's ticket) is answered cold, step by step as ``Decider.run`` answers
it, each step timed: compile (prompt and label paths), plan (label tries, readout contexts), engine
(every ONNX Runtime run with its past, its tokens and how many of them are label tokens; the rest
of the engine: radix tree, masks, KV copies, LM-head rows), readout (chain rule) and reduce.
Interleaved with it: the prefill of the prompt alone (the listing up to the answer position, one
context, no label branches). The request minus that prefill is what the label readout costs.
A mode that compiles to the same prompt and label paths as an earlier one (``names`` and ``auto``,
which is names for a choice) is timed once and listed under ``same_as``.

Options: other prefill chunk sizes (``--chunks``; every chunk's answers are compared bit for bit
with the first's), transformers' prefill of the same tokens (``--torch-gguf tiny``: SDPA attention,
as a yardstick of what a prefill of that many tokens costs on this machine), and ONNX Runtime's
own profile of one prompt prefill (``--ort-profile N``: kernel time by op type, attention vs the
rest, for the N-option prompts).

    python -m benchmarks.many_options --model tiny [--options 26,128,255] [--modes auto,names,letters]
        [--rounds 1] [--chunks 2048,512] [--torch-gguf tiny] [--ort-profile 255] [--threads 2] [--out FILE]

Prints a table and writes the schema-1 result (results/many_options/<model>-<cpuclass>-<date>.json).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.workloads import queue_choice
from typed_decisions import reducers
from typed_decisions.decider import Decider, parse_request
from typed_decisions.engine.tree_block import depths
from typed_decisions.readout_plan import plan_readout

PHASES = ("compile", "plan", "engine_ort", "engine_rest", "readout", "reduce")


def answer_in_phases(d: Decider, body: dict[str, Any], mode: str) -> tuple[np.ndarray, dict[str, Any]]:
    """One request's single question answered as ``Decider.run`` answers it (no calibration, no
    cache: build the Decider with ``cache_bytes=0``), each step timed. Returns the probabilities and
    ``{"seconds": {phase: s}, "runs": [{past, tokens, label_tokens, rows, s, cpu_s}], ...}`` (cpu_s:
    this process's CPU seconds, every thread: steadier than wall time on a shared machine)."""
    backbone = d.engine.backbone
    inner = backbone.run_blocks
    runs: list[dict[str, Any]] = []
    prompt_len = 0

    def timed_run(blocks, past, **kwargs):  # type: ignore[no-untyped-def]
        t, c = time.perf_counter(), time.process_time()
        out = inner(blocks, past, **kwargs)  # layers_out, when the engine keeps mid-layer states
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        labels = sum(int((past.next_pos[i] + depths(b.parent) >= prompt_len).sum()) for i, b in enumerate(blocks))
        runs.append({"past": past.length, "tokens": sum(len(b) for b in blocks), "label_tokens": labels,
                     "rows": len(blocks), "s": round(wall, 4), "cpu_s": round(cpu, 4)})
        return out

    t0 = time.perf_counter()
    comp = d.compiler.compile(parse_request(body), label_mode=mode)  # type: ignore[arg-type]
    (q,) = comp.questions
    prompt_len = len(comp.prefix_ids) + len(q.suffix_ids)
    t1 = time.perf_counter()
    plan = plan_readout([comp])
    t2 = time.perf_counter()
    computed = d.engine.stats.tokens_computed
    backbone.run_blocks = timed_run  # type: ignore[method-assign]
    try:
        logits = d.engine.next_token_logits(plan.contexts, plan.allowed, use_cache=False,
                                            cache_points=[comp.checkpoints] * len(plan.contexts),
                                            owners=[0] * len(plan.contexts))
    finally:
        del backbone.run_blocks
    t3 = time.perf_counter()
    ((read,),) = plan.readouts(logits)
    p = read.probabilities()
    t4 = time.perf_counter()
    reducers.reduce_choice(p, list(q.options), d.confidence_kind)
    t5 = time.perf_counter()
    ort = sum(r["s"] for r in runs)
    seconds = {"compile": t1 - t0, "plan": t2 - t1, "engine_ort": ort, "engine_rest": t3 - t2 - ort,
               "readout": t4 - t3, "reduce": t5 - t4}
    return p, {"seconds": seconds, "total_s": t5 - t0, "runs": runs, "prompt_tokens": prompt_len,
               "label_paths": len(q.label_paths.paths), "readouts": len(plan.contexts),
               "tokens_computed": d.engine.stats.tokens_computed - computed}


def prompt_and_root(d: Decider, body: dict[str, Any], mode: str) -> tuple[list[int], tuple[int, ...], tuple]:
    """The question's prompt (prefix + suffix: everything up to the answer position), the trie
    root's allowed tokens, and what the engine is asked (prompt and label paths: two modes that
    compile alike, as auto and names do for a choice, are timed once)."""
    comp = d.compiler.compile(parse_request(body), label_mode=mode)  # type: ignore[arg-type]
    (q,) = comp.questions
    plan = plan_readout([comp], read_roots=True)
    prompt = list(comp.prefix_ids + q.suffix_ids)
    return prompt, plan.allowed[0], (tuple(prompt), q.label_paths.paths, q.label_paths.owners)


def ort_profile(d: Decider, prompt: list[int], root: tuple[int, ...], threads: int | None) -> dict[str, Any]:
    """ONNX Runtime's profile of one prefill of ``prompt`` (a second session with profiling on,
    swapped in for the call): kernel seconds per op type, split into attention — a node with a
    per-head input (batch, heads, ...) one of whose later sizes is the run's past + tokens: scores,
    mask, softmax, the K/V they read (and, in a run without a past, the per-head reshapes and
    rotary of the keys) — and the rest (the weight MatMuls, norms, MLP)."""
    import onnxruntime as ort

    backbone = d.engine.backbone
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or os.cpu_count() or 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    session = ort.InferenceSession(str(backbone.onnx_path), opts, providers=["CPUExecutionProvider"])
    totals: list[int] = []
    heads = {d.artifacts.architecture.num_attention_heads, backbone.kv_heads}
    inner = backbone.run_blocks

    def noted(blocks, past):  # type: ignore[no-untyped-def]
        totals.append(past.length + max(len(b) for b in blocks))
        return inner(blocks, past)

    kept, backbone.session = backbone.session, session
    backbone.run_blocks = noted  # type: ignore[method-assign]
    try:
        d.engine.next_token_logits([prompt], [root], use_cache=False)
    finally:
        backbone.session = kept
        del backbone.run_blocks
    path = Path(session.end_profiling())
    events = json.loads(path.read_text())
    path.unlink()
    model_runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    by_op: collections.Counter[str] = collections.Counter()
    for run, total in zip(model_runs, totals):
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") \
                    and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]:
                shapes = [next(iter(x.values())) for x in e["args"].get("input_type_shape", [])]
                part = "attention" if any(len(sh) >= 4 and sh[1] in heads and total in sh[2:] for sh in shapes) \
                    else "rest"
                by_op[f"{part}:{e['args']['op_name']}"] += e["dur"]
    kernel = sum(by_op.values())
    attention = sum(v for k, v in by_op.items() if k.startswith("attention:"))
    return {"runs": len(model_runs), "run_totals": totals, "kernel_s": kernel / 1e6,
            "attention_share": round(attention / kernel, 3) if kernel else None,
            "by_op_s": {k: round(v / 1e6, 3) for k, v in by_op.most_common(12)}}


def torch_prefill(gguf: str, threads: int | None):  # type: ignore[no-untyped-def]
    """A function timing transformers' prefill (fp32, SDPA attention) of a prompt: the yardstick."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM

    from typed_decisions.models import pull

    path = Path(gguf) if Path(gguf).is_file() else pull(gguf, progress=False)
    if threads:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()

    def prefill(prompt: list[int]) -> None:
        with torch.no_grad():
            model.model(input_ids=torch.tensor([prompt]))

    return prefill


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="export directory or catalogue name (Decider.load)")
    p.add_argument("--options", default="26,128,255", help="option counts (comma-separated, each >= 3)")
    p.add_argument("--modes", default="auto,names,letters", help="label modes (auto is names for a choice)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds (each times every system once)")
    p.add_argument("--chunks", default="", help="prefill chunk sizes to compare (default: the engine's)")
    p.add_argument("--torch-gguf", default=None, help="also time transformers' prefill of each prompt "
                   "(a GGUF path or catalogue name, e.g. tiny)")
    p.add_argument("--ort-profile", type=int, default=0, metavar="N",
                   help="ONNX Runtime's op profile of the prefill of the N-option prompts (one more prefill each)")
    harness.common_args(p)
    args = p.parse_args(argv)
    load_start = os.getloadavg()

    d = Decider.load(args.model, threads=args.threads, cache_bytes=0)
    default_chunk = d.engine.prefill_chunk
    chunks = [int(c) for c in args.chunks.split(",") if c] or [default_chunk]
    counts = [int(n) for n in args.options.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    answer_in_phases(d, queue_choice(3, d.name), "auto")  # warm-up (session, allocator)

    fns, before, detail, probs = {}, {}, collections.defaultdict(list), {}
    prompts: dict[str, tuple[list[int], tuple[int, ...]]] = {}
    same_as: dict[str, str] = {}  # "n/mode" → the "n/mode" that compiles alike and is timed instead
    for n in counts:
        body = queue_choice(n, d.name)
        asked: dict[tuple, str] = {}
        for mode in modes:
            prompt, root, what = prompt_and_root(d, body, mode)
            if what in asked:
                same_as[f"{n}/{mode}"] = asked[what]
                continue
            asked[what] = f"{n}/{mode}"
            prompts[f"{n}/{mode}"] = (prompt, root)
            for chunk in chunks:
                key = f"{n}/{mode}" + (f"/chunk{chunk}" if len(chunks) > 1 else "")
                set_chunk = functools.partial(setattr, d.engine, "prefill_chunk", chunk)
                before[key + "/request"] = before[key + "/prefill"] = set_chunk

                def request(key: str = key, body: dict[str, Any] = body, mode: str = mode) -> None:
                    probs[key], info = answer_in_phases(d, body, mode)
                    detail[key].append(info)

                def prefill(pr: tuple[list[int], tuple[int, ...]] = prompts[f"{n}/{mode}"]) -> None:
                    d.engine.next_token_logits([pr[0]], [pr[1]], use_cache=False)

                fns[key + "/request"], fns[key + "/prefill"] = request, prefill
    torch_of: dict[str, str] = {}  # prompt key → the system timing transformers on that prompt
    if args.torch_gguf:
        torch_fn = torch_prefill(args.torch_gguf, args.threads)
        first: dict[tuple[int, ...], str] = {}
        for key, (prompt, _) in prompts.items():
            if tuple(prompt) not in first:  # one prompt, timed once
                first[tuple(prompt)] = key + "/torch_prefill"
                fns[key + "/torch_prefill"] = functools.partial(torch_fn, prompt)
            torch_of[key] = first[tuple(prompt)]
    cpu: dict[str, list[float]] = collections.defaultdict(list)

    def cpu_timed(name: str, fn: Any) -> Any:
        def call() -> None:
            c = time.process_time()
            fn()
            cpu[name].append(time.process_time() - c)
        return call

    times, _ = harness.interleaved({k: cpu_timed(k, f) for k, f in fns.items()}, rounds=args.rounds,
                                   before=before, warmup=0)
    d.engine.prefill_chunk = default_chunk

    results: dict[str, Any] = {"options": counts, "modes": modes, "chunks": chunks, "rounds": args.rounds,
                               "state": "jevcompat's ticket (workloads.JEV_TICKET)", "same_as": same_as,
                               "systems": {}}
    rows = []
    for n in counts:
        for mode in modes:
            if f"{n}/{mode}" in same_as:
                rows.append(f"| {n} | {mode} | the same prompt and label paths as {same_as[f'{n}/{mode}']} |")
                continue
            for chunk in chunks:
                key = f"{n}/{mode}" + (f"/chunk{chunk}" if len(chunks) > 1 else "")
                ref = f"{n}/{mode}" + (f"/chunk{chunks[0]}" if len(chunks) > 1 else "")
                infos, req_s, pre_s = detail[key], times[key + "/request"], times[key + "/prefill"]
                req_c, pre_c = cpu[key + "/request"], cpu[key + "/prefill"]
                labels = [r - q for r, q in zip(req_s, pre_s)]
                labels_c = [r - q for r, q in zip(req_c, pre_c)]
                last = infos[-1]
                entry = {
                    "options": n, "mode": mode, "prefill_chunk": chunk, "prompt_tokens": last["prompt_tokens"],
                    "label_paths": last["label_paths"], "readouts": last["readouts"],
                    "label_tokens_computed": last["tokens_computed"] - last["prompt_tokens"],
                    "request_s": [round(x, 3) for x in req_s], "prompt_prefill_s": [round(x, 3) for x in pre_s],
                    "request_cpu_s": [round(x, 3) for x in req_c], "prompt_prefill_cpu_s": [round(x, 3) for x in pre_c],
                    "labels_s": round(statistics.median(labels), 3),
                    "labels_share": round(statistics.median(labels) / statistics.median(req_s), 3),
                    "labels_cpu_s": round(statistics.median(labels_c), 3),
                    "labels_cpu_share": round(statistics.median(labels_c) / statistics.median(req_c), 3),
                    # the same from the runs: each run's time shared out by its tokens (label tokens
                    # sit at the end of their run and attend to more columns: a lower bound)
                    "labels_by_runs_s": round(statistics.median(
                        sum(r["s"] * r["label_tokens"] / r["tokens"] for r in i["runs"]) for i in infos), 3),
                    "labels_by_runs_cpu_s": round(statistics.median(
                        sum(r["cpu_s"] * r["label_tokens"] / r["tokens"] for r in i["runs"]) for i in infos), 3),
                    "phases_s": {ph: round(statistics.median(i["seconds"][ph] for i in infos), 4) for ph in PHASES},
                    "runs": last["runs"], "choice": int(np.argmax(probs[key])), "p_max": float(np.max(probs[key])),
                    "bitwise_equal_to": ref, "bitwise_equal": bool(np.array_equal(probs[key], probs[ref])),
                }
                if f"{n}/{mode}" in torch_of:
                    t, tc = times[torch_of[f"{n}/{mode}"]], cpu[torch_of[f"{n}/{mode}"]]
                    entry["torch_prefill_s"] = [round(x, 3) for x in t]
                    entry["torch_prefill_cpu_s"] = [round(x, 3) for x in tc]
                    entry["prompt_prefill_over_torch"] = round(statistics.median(pre_s) / statistics.median(t), 3)
                    entry["prompt_prefill_over_torch_cpu"] = round(statistics.median(pre_c) / statistics.median(tc), 3)
                if args.ort_profile == n and chunk == chunks[0]:
                    d.engine.prefill_chunk = chunk
                    entry["ort_profile"] = ort_profile(d, *prompts[f"{n}/{mode}"], args.threads)
                    d.engine.prefill_chunk = default_chunk
                results["systems"][key] = entry
                ph = entry["phases_s"]
                rows.append(f"| {n} | {mode} | {chunk} | {entry['prompt_tokens']} | {entry['readouts']} | "
                            f"{entry['label_tokens_computed']} | {len(entry['runs'])} | "
                            f"{statistics.median(req_s):.2f} / {statistics.median(req_c):.2f} | "
                            f"{statistics.median(pre_s):.2f} / {statistics.median(pre_c):.2f} | "
                            f"{entry['labels_cpu_s']:.2f} ({100 * entry['labels_cpu_share']:.0f} %) | "
                            f"{entry['labels_by_runs_cpu_s']:.2f} | "
                            f"{1e3 * ph['compile']:.0f} | {1e3 * ph['plan']:.0f} | {1e3 * ph['engine_rest']:.0f} | "
                            f"{1e3 * (ph['readout'] + ph['reduce']):.1f} | {entry['bitwise_equal']} |")
    print("| options | mode | chunk | prompt tokens | readouts | label tokens | runs | request s (wall / CPU) "
          "| prompt prefill s (wall / CPU) | labels CPU s (share) | label runs CPU s | compile ms | plan ms | engine outside ORT ms | readout + reduce ms | same bits |")
    print("|" + "---|" * 16)
    print("\n".join(rows))
    path = harness.write_result("many_options", d.name, results, out=args.out, load_avg_start=load_start,
                                command=harness.command("benchmarks.many_options", argv))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
