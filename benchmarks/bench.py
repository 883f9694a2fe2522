"""Benchmarks against the alternatives: the same weights and the same requests in one process.

Peers (every one gets exactly the token ids our compiler builds):

- ``reference``: what a user would write with transformers/PyTorch — every readout context (prefix
  + question suffix + label-trie node prefix) as a full prompt, all of a request's contexts in
  left-padded batches, no KV reuse, ``last_hidden_state[:, -1] @ lm_head[allowed].T``, then the
  same chain rule (``readout.option_probabilities``). Also the oracle: its probabilities are
  compared with ours (``max_abs_dp``).
- ``free_text``: transformers greedy generation of each question's answer (names prompt), parsed
  (``peers/free_text.py``: ``generate_text`` / ``parse_answer``).
- ``llama_cpp``: llama-cpp-python on the GGUF (Q4_K_M weights), logits of the allowed tokens after
  each context, re-using its own KV for the common prefix with the previous context (as its
  ``generate`` does). Only if ``import llama_cpp`` works.
- ``ours``: Decider fp32 / INT8 × names / letters × cross-request cache off / warm ("warm": the
  state was seen by an earlier request with another question; cache cleared and re-warmed per trial)
  × ``--packed`` auto / off (tree blocks as the engine chooses them, or every radix-tree node a row:
  systems named ``..._unpacked``; ``on`` forces them on INT8 too, ``..._packed``).

Workloads: W1 one noul about a ~100-token state; W2 choice-of-5 + noul + score-of-5 about a
~300-token state; W3 a 20-option choice; W4 a 200-option choice and, for the ratio, W4-5: a
5-option choice of the same kind about the same state. W5: ``--w5-clients`` concurrent HTTP clients
(default 16) against ``typed-decisions serve`` (a subprocess, micro-batching on, then off), each
sending ``--w5-requests`` W2 requests, every one about a different ticket (``w5_requests``); the
baseline is the same requests answered one by one in-process, and every HTTP answer is compared
with it (``load.py``'s client and comparison code).

Also measured in the same run: matmul peaks (torch fp32/bf16/int8 and ONNX Runtime fp32/int8, 2048³
GEMMs on the benchmark's threads; a kernel the CPU emulates, e.g. torch bf16 on AVX2, on a 1024³ or
512³ one, named in ``matmul_peaks_n``), prefill GFLOP/s = 2·params·tokens/time (params: the backbone's
matmul weights, no embedding; attention score FLOPs not counted), ORT op types by time for the
INT8 (and fp32) prefill (session profiling), peak RSS per phase, the load average.

    python -m benchmarks.bench --model tiny --trials 5
    python -m benchmarks.bench --model default --trials 3          # results/bench/<model>-<cpuclass>-<date>.json
    python -m benchmarks.bench --model tiny --workloads W5 --peers ours --w5-clients 16 --w5-requests 4

Peers live in ``peers/``, the requests in ``workloads.py``, timing and the result writer in
``harness.py``, the exports run (fp32, INT8 sibling, GGUF) in ``exports.py``, the GEMM peaks and the
prefill profile in ``peaks.py``, W5 in ``w5.py``, the ratios line and the table in ``report.py``;
this file holds the phases of one run and their order. The result file is written after every measurement (``"partial": true`` until the
run ends). The last line printed is one JSON object of ratios (peer median / ours median; > 1 =
ours faster).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks import harness
from benchmarks.exports import make_int8, resolve_model
from benchmarks.harness import RssSampler, interleaved, round_ratios, summarize, timed
from benchmarks.peaks import backbone_params, matmul_peaks, profile_prefill
from benchmarks.peers.free_text import generate_text, load_torch_model, parse_answer
from benchmarks.peers.llama_cpp import LlamaCpp, import_llama_cpp
from benchmarks.peers.reference import Reference, probabilities_from, readout_plan
from benchmarks.report import print_table, ratios
from benchmarks.w5 import run_w5
from benchmarks.workloads import warm_request, workloads

# --------------------------------------------------------------------------- arguments


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="catalogue name (tiny, default, ...) or an export directory")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--workloads", default="W1,W2,W3,W4,W5")
    p.add_argument("--peers", default="ours,reference,free_text,llama_cpp")
    p.add_argument("--ours", default="fp32,int8", help="dtypes of ours to run")
    p.add_argument("--modes", default="names,letters")
    p.add_argument("--cache", default="off,warm", help="cross-request cache variants of ours")
    p.add_argument("--packed", default="auto,off",
                   help="tree-block variants of ours: auto (the engine's default: packed for float32 exports "
                        "of format version 2), off (every node a row: system name + '_unpacked'), on (forced, "
                        "also INT8: '_packed'); the ratios line gets packed_speedup = unpacked / auto")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed calls before each measurement (a loaded Decider always answers W1 once first)")
    p.add_argument("--ref-max-tokens", type=int, default=16384,
                   help="skip a reference request above this many padded tokens (time estimated instead)")
    p.add_argument("--peer-trials", type=int, default=None, help="trials for reference/free text/llama.cpp")
    p.add_argument("--peer-workloads", default=None, help="workloads the peers run (default: all of --workloads)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--profile", default="int8,fp32", help="dtypes whose prefill is profiled (or 'none')")
    p.add_argument("--llama-site", default="/tmp/llvenv/lib/python3.11/site-packages",
                   help="site-packages of a throwaway venv holding llama_cpp, imported from there when this "
                        "interpreter has none (peers/llama_cpp.py: import_llama_cpp)")
    p.add_argument("--llama-max-dp", type=float, default=0.1,
                   help="largest |p_llama.cpp - p_ours fp32| accepted (quantized vs de-quantized weights; "
                        "measured 0.005-0.03 on the default model); above it the run fails")
    p.add_argument("--interleave", type=int, default=0, metavar="N",
                   help="also time ours (each --ours dtype) and llama.cpp (prefix reuse) in turn, N rounds per "
                        "workload, all loaded at once: ratios that a drifting machine speed cannot skew")
    p.add_argument("--llama-no-reuse-max-tokens", type=int, default=20_000,
                   help="skip llama.cpp without prefix reuse on a workload with more context tokens")
    p.add_argument("--w5-clients", type=int, default=16, help="W5: concurrent HTTP clients")
    p.add_argument("--w5-requests", type=int, default=4, help="W5: requests per client (each a different state)")
    p.add_argument("--w5-dtype", choices=["fp32", "int8"], default=None,
                   help="W5: the export the server and the in-process baseline load (default: the first of --ours)")
    p.add_argument("--w5-atol", type=float, default=1e-5,
                   help="W5: largest difference of a number in an HTTP answer from the in-process one")
    p.add_argument("--int8-dir", type=Path, default=None,
                   help="INT8 export to run as ours int8 (default: <fp32 export>-int8, made when missing)")
    p.add_argument("--torch-weights", type=Path, default=None,
                   help="what transformers loads for the reference and free-text peers: the export's GGUF "
                        "(default) or a Hugging Face folder holding the same weights (loads in seconds "
                        "where transformers takes ~16 s to read the tiny model's GGUF)")
    return harness.common_args(p)


@dataclass
class Run:
    """What the phases of one benchmark run share: the arguments, the model, the workloads, the
    results so far (written after every measurement, so a killed run leaves a partial file)."""

    args: argparse.Namespace
    argv: list[str] | None
    res: dict[str, Any]
    out: Path
    rss: RssSampler
    tok: Any
    params: int
    fp32_dir: Path
    int8_dir: Path | None
    gguf: Path | None
    wl_names: list[str]
    reqs: dict[str, dict[str, Any]]                     # W1-W4 (W5 is its own phase)
    compiled: dict[tuple[str, str], Any] = field(default_factory=dict)            # (workload, mode)
    ours_probs: dict[tuple[str, str, str], dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def peer_trials(self) -> int:
        return self.args.peer_trials or self.args.trials

    @property
    def w5_dtype(self) -> str:
        return self.args.w5_dtype or self.args.ours.split(",")[0]

    def save(self, **extra: Any) -> None:
        """The result file as it stands (harness.write_result; the machine record ends now)."""
        harness.write_result("bench", self.res["model"], self.res, command=harness.command("benchmarks.bench", self.argv),
                             out=self.out, load_avg_start=tuple(self.res["load_avg_start"]), **extra)

    def save_partial(self) -> None:
        self.save(partial=True)

    def record(self, system: str, wl: str, times: list[float], **extra: Any) -> None:
        self.res["results"].setdefault(wl, {})[system] = {**summarize(times), **extra}
        self.save_partial()  # survives a kill

    def peer_requests(self, mode: str) -> list[tuple[str, Any]]:
        """(workload, compiled request) for the peers: the workloads they run that ours compiled."""
        peer_wls = set((self.args.peer_workloads or self.args.workloads).split(","))
        return [(wl, self.compiled[(wl, mode)]) for wl in self.reqs
                if wl in peer_wls and (wl, mode) in self.compiled]

    def max_abs_dp(self, wl: str, mode: str, probs: dict[str, np.ndarray]) -> float | None:
        """Largest |p_peer − p_ours fp32| over the request's options (None if ours did not run)."""
        ours = self.ours_probs.get((wl, mode, "fp32"))
        return max(float(np.abs(probs[k] - ours[k]).max()) for k in probs) if ours else None


def start_run(args: argparse.Namespace, argv: list[str] | None = None) -> Run:
    """Resolve (and if needed quantize) the model, build the workloads, measure the matmul peaks."""
    from typed_decisions.artifacts import load_artifacts
    from typed_decisions.tokenization import TextTokenizer

    wl_names = args.workloads.split(",")
    if "W4" in wl_names and "W4-5" not in wl_names:
        wl_names.append("W4-5")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    rss = RssSampler()
    fp32_dir, int8_dir, gguf = resolve_model(args.model)
    if args.int8_dir is not None:
        int8_dir = args.int8_dir.expanduser().resolve()
        if not (int8_dir / "manifest.json").is_file():
            raise SystemExit(f"--int8-dir {args.int8_dir}: no manifest.json there")
    w5_dtype = args.w5_dtype or args.ours.split(",")[0]
    if ("int8" in args.ours or ("W5" in wl_names and w5_dtype == "int8")) and int8_dir is None:
        rss.phase("export_int8")
        int8_dir, note = make_int8(fp32_dir)
        if note:
            print("int8:", note, file=sys.stderr)
    art = load_artifacts(fp32_dir, verify=False)
    params = backbone_params(art.onnx_path, art.architecture.vocab_size)
    res: dict[str, Any] = {
        "model": art.name, "fp32_dir": str(fp32_dir), "int8_dir": str(int8_dir) if int8_dir else None,
        "gguf": str(gguf) if gguf else None, "backbone_params": params, "threads": args.threads,
        "trials": args.trials, "peer_trials": args.peer_trials or args.trials,
        "load_avg_start": os.getloadavg(), "results": {}, "skipped": {},
    }
    print(f"model {art.name}: {params / 1e6:.1f} M backbone matmul params; fp32 {fp32_dir}; int8 {int8_dir}; "
          f"gguf {gguf}; load {os.getloadavg()}", file=sys.stderr)
    tok = TextTokenizer(art.tokenizer_path, art.tokenizer_info)
    reqs = {k: v for k, v in workloads(tok).items() if k in wl_names}
    if reqs:  # the peaks are only compared with the prefill of W1-W4's ours
        rss.phase("matmul_peaks")
        peaks = matmul_peaks(args.threads)
        res["matmul_peaks_gflops"] = {k: v["gflops"] for k, v in peaks.items()}
        res["matmul_peaks_n"] = {k: v["n"] for k, v in peaks.items()}  # < 2048: an emulated kernel
        print("matmul peaks GFLOP/s", res["matmul_peaks_gflops"], file=sys.stderr)
    out = args.out or harness.result_path("bench", art.name)
    return Run(args=args, argv=argv, res=res, out=out, rss=rss, tok=tok, params=params, fp32_dir=fp32_dir,
               int8_dir=int8_dir, gguf=gguf, wl_names=wl_names, reqs=reqs)


def run_ours(run: Run) -> None:
    """Decider fp32 / INT8 × label modes × cache off / warm on W1-W4, and the bare prefill."""
    from typed_decisions.decider import Decider, parse_request

    args = run.args
    suffix = {"auto": "", "off": "_unpacked", "on": "_packed"}  # system-name suffix per variant
    if not set(args.packed.split(",")) <= set(suffix):
        raise SystemExit(f"--packed {args.packed!r}: each variant must be auto, off or on")
    for dtype, mode, packing in [(t, m, k) for t in args.ours.split(",") for m in args.modes.split(",")
                                 for k in args.packed.split(",")]:
        d = run.fp32_dir if dtype == "fp32" else run.int8_dir
        run.rss.phase(f"ours_{dtype}")
        dec = Decider.load(d, label_mode=mode, threads=args.threads,
                               packed={"auto": None, "off": False, "on": True}[packing])
        eng = dec.engine
        run.res.setdefault("packed", {})[f"{dtype}{suffix[packing]}"] = {"packed": eng.packed,
                                                                        "reason": eng.packed_reason}
        dec.run(workloads(run.tok)["W1"], label_mode=mode)  # first-run allocations, untimed
        for wl, rq in run.reqs.items():
            comp = dec.compiler.compile(parse_request(rq), label_mode=mode)
            run.compiled[(wl, mode)] = comp
            n_questions = len(comp.questions)
            for cache in args.cache.split(","):
                before = (lambda rq=rq: (eng.clear_cache(), dec.run(warm_request(rq)))) if cache == "warm" else None
                acc = np.zeros(3)  # tokens computed, tokens logical, ORT runs of the timed calls

                def fn(rq: dict = rq, u: bool = cache == "warm", acc: np.ndarray = acc) -> dict:
                    s0 = np.array([eng.stats.tokens_computed, eng.stats.tokens_logical, eng.stats.runs])
                    probs = dec.probabilities(rq, use_cache=u)  # = run() minus the reducers
                    acc += np.array([eng.stats.tokens_computed, eng.stats.tokens_logical, eng.stats.runs]) - s0
                    return probs

                times, probs = timed(fn, args.trials, f"ours {dtype} {mode} {cache} {wl}", before, args.warmup)
                computed, logical, runs = acc / (args.trials + args.warmup)
                run.ours_probs[(wl, mode, dtype)] = probs
                med = float(np.median(times))
                run.record(f"ours_{dtype}_{mode}_cache-{cache}{suffix[packing]}", wl, times,
                           tokens_computed=round(computed),
                           tokens_logical=round(logical), ort_runs=round(runs, 1),
                           requests_per_s=round(1 / med, 3), questions_per_s=round(n_questions / med, 3),
                           prefill_gflops=round(2 * run.params * computed / med / 1e9, 2))
        if mode == args.modes.split(",")[0] and packing == args.packed.split(",")[0]:
            measure_prefill(run, dtype, mode, eng)
        dec = eng = None  # free this model before the next one loads
        gc.collect()


def measure_prefill(run: Run, dtype: str, mode: str, eng: Any) -> None:
    """Prefill alone (W2's state prefix, no cache): the number the matmul peaks are compared with."""
    key = "W2" if "W2" in run.reqs else next(iter(run.reqs))
    ids = list(run.compiled[(key, mode)].prefix_ids)
    times, _ = timed(lambda: eng.next_token_logits([ids], [[0, 1]], use_cache=False),
                     run.args.trials, f"prefill {dtype}", warmup=run.args.warmup)
    med = float(np.median(times))
    run.res.setdefault("prefill", {})[dtype] = {**summarize(times), "tokens": len(ids),
                                                "gflops": round(2 * run.params * len(ids) / med / 1e9, 2)}
    if "W4" in run.reqs:  # W4's own prompt (prefix + its question's suffix): what reading 200 options adds to
        comp = run.compiled[("W4", mode)]
        ids = list(comp.prefix_ids) + list(comp.questions[0].suffix_ids)
        times, _ = timed(lambda: eng.next_token_logits([ids], [[0, 1]], use_cache=False),
                         run.args.trials, f"prefill W4 prompt {dtype}", warmup=run.args.warmup)
        run.res.setdefault("prefill_w4_prompt", {})[dtype] = {**summarize(times), "tokens": len(ids)}


def run_profiles(run: Run) -> None:
    """ORT op types by time for the prefill of each dtype in ``--profile``."""
    for dtype in [x for x in run.args.profile.split(",") if x in ("fp32", "int8")]:
        run.rss.phase(f"profile_{dtype}")
        key = "W2" if "W2" in run.reqs else next(iter(run.reqs))
        comp = run.compiled.get((key, run.args.modes.split(",")[0]))
        if comp is None:
            continue
        run.res.setdefault("ort_profile", {})[dtype] = profile_prefill(
            run.fp32_dir if dtype == "fp32" else run.int8_dir, list(comp.prefix_ids), run.args.threads)
        print(f"profile {dtype}:", run.res["ort_profile"][dtype]["op_types_by_time"][:5], file=sys.stderr)


def run_reference(run: Run, model: Any, mode: str) -> None:
    """transformers, every context a full prompt; probabilities compared with ours fp32."""
    run.rss.phase("reference")
    ref = Reference(model)
    R = run.res["results"]
    per_token: list[float] = []
    for wl, comp in run.peer_requests(mode):
        plan = readout_plan(comp)
        ctx, allowed = list(plan.contexts), list(plan.allowed)
        cost = ref.cost(ctx)
        if cost > run.args.ref_max_tokens:
            run.res["skipped"][f"reference/{wl}"] = (f"{len(ctx)} contexts, {cost} padded tokens > "
                                                     f"--ref-max-tokens {run.args.ref_max_tokens}")
            R.setdefault(wl, {})["reference_estimated"] = {"padded_tokens": cost}
            continue
        times, (logits, computed) = timed(lambda c=ctx, a=allowed: ref.logits(c, a), run.peer_trials,
                                          f"reference {wl}", warmup=run.args.warmup)
        probs = probabilities_from(plan, logits)
        dp = run.max_abs_dp(wl, mode, probs)
        med = float(np.median(times))
        per_token.append(med / computed)
        ours = run.ours_probs.get((wl, mode, "fp32"))
        apart = {} if dp is None or dp <= 1e-5 else {   # both sides' numbers, to tell which one moved
            "probabilities_where_apart": {k: {"ours": ours[k].tolist(), "reference": probs[k].tolist()} for k in probs}}
        run.record("reference", wl, times, tokens_computed=computed, contexts=len(ctx),
                   tokens_logical=sum(len(c) for c in ctx), requests_per_s=round(1 / med, 3),
                   prefill_gflops=round(2 * run.params * computed / med / 1e9, 2), max_abs_dp_vs_ours_fp32=dp, **apart)
    for wl, r in R.items():  # estimated times of skipped requests, from the measured per-token cost
        if "reference_estimated" in r and per_token:
            r["reference_estimated"]["median_s"] = r["reference_estimated"]["padded_tokens"] * float(np.median(per_token))


def run_free_text(run: Run, model: Any, mode: str) -> None:
    """transformers greedy generation of each question's answer, parsed; agreement with ours."""
    run.rss.phase("free_text")
    for wl, comp in run.peer_requests(mode):  # the same prompts as the other peers
        prompts = [list(comp.prefix_ids + q.suffix_ids) for q in comp.questions]
        texts: list[str] = []

        def gen(prompts: list[list[int]] = prompts, texts: list[str] = texts) -> None:
            texts[:] = [generate_text(model, run.tok, ids, run.args.max_new_tokens) for ids in prompts]

        times, _ = timed(gen, run.peer_trials, f"free text {wl}", warmup=run.args.warmup)
        parsed = [parse_answer(t, list(q.labels)) for t, q in zip(texts, comp.questions)]
        ours = run.ours_probs.get((wl, mode, "fp32"))
        agree = [int(np.argmax(ours[q.name])) == pi for q, pi in zip(comp.questions, parsed)] if ours else []
        med = float(np.median(times))
        run.record("free_text", wl, times, tokens_logical=sum(map(len, prompts)), texts=texts,
                   parsed=sum(x is not None for x in parsed), agree_with_ours=sum(agree),
                   questions=len(parsed), requests_per_s=round(1 / med, 3))


def run_transformers_peers(run: Run, peers: set[str], mode: str) -> None:
    """Load the weights in transformers once (the GGUF, or --torch-weights), then the reference and
    free-text peers."""
    run.rss.phase("transformers_load")
    weights = run.args.torch_weights or run.gguf
    if weights is None:
        run.res["skipped"]["transformers"] = "no GGUF for this export: the reference needs the same weights"
        return
    import torch

    torch.set_num_threads(run.args.threads)
    t0 = time.perf_counter()
    model = load_torch_model(weights)
    run.res["torch_weights"] = str(weights)
    run.res["transformers_load_s"] = round(time.perf_counter() - t0, 1)
    if "reference" in peers:
        run_reference(run, model, mode)
    if "free_text" in peers:
        run_free_text(run, model, mode)
    del model
    gc.collect()


def _llama_cpp(run: Run, system: str) -> LlamaCpp | None:
    """llama.cpp on the run's GGUF with a context for the longest readout context, or None (and why,
    under ``skipped[system]``) when llama_cpp does not import or there is no GGUF."""
    try:
        import_llama_cpp(run.args.llama_site)
    except Exception as e:  # ImportError, or a broken shared library
        run.res["skipped"][system] = f"import llama_cpp failed: {type(e).__name__}: {e}"
        return None
    if run.gguf is None:
        run.res["skipped"][system] = "no GGUF for this export"
        return None
    longest = max(len(c) for comp in run.compiled.values() for c in readout_plan(comp).contexts)
    return LlamaCpp(run.gguf, run.args.threads, n_ctx=longest + 16)


def run_llama_cpp(run: Run, mode: str) -> None:
    """llama-cpp-python on the GGUF, with and without its own prefix reuse.

    Its probabilities must agree with ours (fp32, de-quantized from the same GGUF) within
    ``--llama-max-dp``: a peer that reads the wrong buffer fails the run instead of printing a
    number. Without reuse, a workload that would evaluate more than ``--llama-no-reuse-max-tokens``
    tokens is skipped (W4 re-evaluates 200 contexts of ~1,200 tokens: about an hour on 2 cores)."""
    run.rss.phase("llama_cpp")
    lc = _llama_cpp(run, "llama_cpp")
    if lc is None:
        return
    run.res["llama_cpp_version"] = lc.version
    disagreements = []
    for wl, comp in run.peer_requests(mode):
        plan = readout_plan(comp)
        ctx, allowed = list(plan.contexts), list(plan.allowed)
        for reuse in (False, True):
            system = f"llama_cpp{'_prefix-reuse' if reuse else ''}"
            tokens = sum(len(c) for c in ctx)
            if not reuse and tokens > run.args.llama_no_reuse_max_tokens:
                run.res["skipped"][f"{system}/{wl}"] = (
                    f"would evaluate {tokens} tokens from scratch (> --llama-no-reuse-max-tokens "
                    f"{run.args.llama_no_reuse_max_tokens}); measured with prefix reuse only")
                continue
            times, (logits, computed) = timed(lambda c=ctx, a=allowed, r=reuse: lc.logits(c, a, r),
                                              run.peer_trials, f"llama.cpp reuse={reuse} {wl}",
                                              before=lambda: lc.llm.reset(), warmup=run.args.warmup)
            dp = run.max_abs_dp(wl, mode, probabilities_from(plan, logits))
            med = float(np.median(times))
            run.record(system, wl, times, tokens_computed=computed,
                       requests_per_s=round(1 / med, 3), max_abs_dp_vs_ours_fp32_q4_weights=dp)
            if dp is not None and dp > run.args.llama_max_dp:
                disagreements.append(f"{system} {wl}: max |dp| {dp:.4f}")
    if disagreements:
        raise SystemExit(f"llama.cpp disagrees with ours by more than --llama-max-dp "
                         f"{run.args.llama_max_dp}: {'; '.join(disagreements)} — the peer reads the "
                         "wrong logits, or the GGUF is not the one the export was made from")


def run_interleaved(run: Run, mode: str) -> None:
    """``--interleave N``: ours (each ``--ours`` dtype, cache off, the engine's default packing) and
    llama.cpp (prefix reuse), all loaded at once, timed in turn for N rounds per peer workload
    (``interleaved``). Recorded under ``interleaved.<wl>``; the ratios line gets
    ``<wl>/interleaved/llama_cpp_prefix-reuse/ours_<dtype>``, the median over rounds of llama.cpp's
    time over ours in the same round. llama.cpp's probabilities are held to ``--llama-max-dp`` against
    each dtype's answers of this phase."""
    from typed_decisions.decider import Decider

    run.rss.phase("interleaved")
    lc = _llama_cpp(run, "interleaved")
    if lc is None:
        return
    peer = "llama_cpp_prefix-reuse"
    decs = {dtype: Decider.load(run.fp32_dir if dtype == "fp32" else run.int8_dir, label_mode=mode,
                                    threads=run.args.threads) for dtype in run.args.ours.split(",")}
    for dec in decs.values():
        dec.run(workloads(run.tok)["W1"], label_mode=mode)  # first-run allocations, untimed
    for wl, comp in run.peer_requests(mode):
        plan = readout_plan(comp)
        ctx, allowed, rq = list(plan.contexts), list(plan.allowed), run.reqs[wl]
        fns: dict[str, Callable[[], Any]] = {
            f"ours_{dtype}": (lambda dec=dec, rq=rq: dec.probabilities(rq, use_cache=False)) for dtype, dec in decs.items()}
        fns[peer] = lambda: lc.logits(ctx, allowed, True)[0]
        times, outs = interleaved(fns, run.args.interleave, before={peer: lc.llm.reset}, warmup=run.args.warmup)
        theirs = probabilities_from(plan, outs[peer])
        dps = {dtype: max(float(np.abs(theirs[k] - outs[f"ours_{dtype}"][k]).max()) for k in theirs) for dtype in decs}
        if max(dps.values()) > run.args.llama_max_dp:
            raise SystemExit(f"llama.cpp disagrees with ours on {wl}: max |dp| {dps} (> --llama-max-dp {run.args.llama_max_dp})")
        entry: dict[str, Any] = {s: {**summarize(t), "times": [round(x, 4) for x in t]} for s, t in times.items()}
        entry["ratio_per_round"] = {f"{peer}/ours_{dtype}": [round(r, 3) for r in round_ratios(times[peer], times[f"ours_{dtype}"])]
                                    for dtype in decs}
        entry["max_abs_dp_llama_cpp_vs_ours"] = dps  # per dtype of ours, the answers of this phase
        run.res.setdefault("interleaved", {})[wl] = entry
        run.save_partial()
    decs.clear()
    gc.collect()


def finish(run: Run, mode: str, t_start: float) -> None:
    """Peak memory, wall time, ratios; write the results, print the table and the ratios line."""
    res = run.res
    run.rss.stop()
    res["peak_rss_mb"] = {k: round(v / 2 ** 20) for k, v in run.rss.peaks.items()}
    res["ru_maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    res["load_avg_end"] = os.getloadavg()
    res["wall_s"] = round(time.time() - t_start, 1)
    res["ratios"] = ratios(res, mode)
    run.save()
    print_table(res)
    print(json.dumps(res["ratios"], separators=(",", ":")))


def main(argv: list[str] | None = None) -> int:
    t_start = time.time()
    args = _parser().parse_args(argv)
    peers = set(args.peers.split(","))
    run = start_run(args, argv)
    if "ours" in peers and run.reqs:
        run_ours(run)
        run_profiles(run)
    mode0 = args.modes.split(",")[0]
    names_mode = "names" if any(m == "names" for (_, m) in run.compiled) else mode0
    if peers & {"reference", "free_text"} and run.reqs:
        run_transformers_peers(run, peers, names_mode)
    if "llama_cpp" in peers and run.reqs:
        run_llama_cpp(run, names_mode)
        gc.collect()
    if args.interleave and "llama_cpp" in peers and run.reqs:
        run_interleaved(run, names_mode)
    if "W5" in run.wl_names:  # concurrent HTTP clients against `typed-decisions serve`
        run.rss.phase("W5")
        w5_dir = run.fp32_dir if run.w5_dtype == "fp32" else run.int8_dir
        run_w5(args, w5_dir, run.w5_dtype, mode0, run.tok, run.res["model"], run.res["results"], run.save_partial)
    finish(run, names_mode, t_start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
