"""A benchmark run's report: the ratios line (peer median / ours median, fractions of the GEMM peak,
W5's wall-time ratios) and the table printed to stderr. Pure functions of the result dict."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def ratios(res: dict[str, Any], mode: str) -> dict[str, Any]:
    """Peer median / ours median (> 1: ours faster); ours = fp32 and int8, ``mode`` labels, cache off.

    W5: ``W5/<a>/<b>`` = wall time of system ``a`` / wall time of ``b`` for the same N requests
    (> 1: ``b`` faster), plus each HTTP configuration's error count and whether all its answers
    equal the in-process sequential ones."""
    R = res["results"]
    out: dict[str, Any] = {"model": res["model"], "load_avg": round(max(res["load_avg_start"][0], res["load_avg_end"][0]), 2)}

    def med(wl: str, system: str) -> float | None:
        r = R.get(wl, {}).get(system)
        return r.get("median_s") if r else None

    for wl in R:
        for dtype in ("fp32", "int8"):
            ours = med(wl, f"ours_{dtype}_{mode}_cache-off")
            if not ours:
                continue
            for peer in ("reference", "reference_estimated", "free_text", "llama_cpp", "llama_cpp_prefix-reuse"):
                m = med(wl, peer)
                if m:
                    out[f"{wl}/{peer}/ours_{dtype}"] = round(m / ours, 2)
    for dtype in ("fp32", "int8"):
        for cache in ("off", "warm"):
            a, b = med("W4", f"ours_{dtype}_{mode}_cache-{cache}"), med("W4-5", f"ours_{dtype}_{mode}_cache-{cache}")
            if a and b:
                out[f"W4_over_W4-5/ours_{dtype}_{mode}_cache-{cache}"] = round(a / b, 2)
            a, b = med("W4", f"ours_{dtype}_letters_cache-{cache}"), med("W4-5", f"ours_{dtype}_letters_cache-{cache}")
            if a and b and mode != "letters":
                out[f"W4_over_W4-5/ours_{dtype}_letters_cache-{cache}"] = round(a / b, 2)
    for wl in R:  # tree blocks: the same requests with every node a row / with the engine's default
        for system in [k for k in R[wl] if k.endswith("_unpacked")]:
            a, b = med(wl, system), med(wl, system[: -len("_unpacked")])
            if a and b:
                out[f"{wl}/packed_speedup/{system[: -len('_unpacked')]}"] = round(a / b, 2)
    w5 = R.get("W5", {})
    for a, b in (("sequential", "http_batched"), ("sequential", "http_unbatched"), ("http_unbatched", "http_batched")):
        if w5.get(a, {}).get("wall_s") and w5.get(b, {}).get("wall_s"):  # the same N requests
            out[f"W5/{a}/{b}"] = round(w5[a]["wall_s"] / w5[b]["wall_s"], 2)
    for b in ("http_batched", "http_unbatched"):
        if b in w5:
            out[f"W5/{b}/errors"] = w5[b]["errors"]
            out[f"W5/{b}/all_equal_sequential"] = w5[b]["all_equal_sequential"]
    for wl, entry in res.get("interleaved", {}).items():  # the same round's times: peer / ours
        for key, rs in entry["ratio_per_round"].items():
            out[f"{wl}/interleaved/{key}"] = round(float(np.median(rs)), 2)
    pf, peaks = res.get("prefill", {}), res.get("matmul_peaks_gflops", {})
    # Fraction of the physical limit: (tokens computed × FLOP per token) / time, over the GEMM peak of
    # the dtype measured in the same run (INT8 exports keep down_proj float32, so their true limit
    # lies between the int8 and the fp32 peak: against the int8 peak the fraction is a lower bound).
    peak = {"fp32": max(peaks.get("torch_fp32", 0), peaks.get("ort_fp32", 0)),
            "int8": max(peaks.get("torch_int8", 0), peaks.get("ort_int8_dynamic", 0))}
    for wl in R:
        for system, r in R[wl].items():
            dtype = next((t for t in ("fp32", "int8") if system.startswith(f"ours_{t}_")), None)
            if dtype and peak[dtype] and r.get("prefill_gflops"):
                out[f"{wl}/of_limit/{system}"] = round(r["prefill_gflops"] / peak[dtype], 2)
    for dtype, p in res.get("prefill_w4_prompt", {}).items():  # W4 total / the prefill of its own prompt
        w4 = med("W4", f"ours_{dtype}_{mode}_cache-off")
        if w4 and p.get("median_s"):
            out[f"W4_over_its_prompt_prefill/ours_{dtype}"] = round(w4 / p["median_s"], 2)
    if "fp32" in pf and "int8" in pf:
        out["prefill_int8_over_fp32"] = round(pf["int8"]["gflops"] / pf["fp32"]["gflops"], 2)
    if "fp32" in pf:
        out["prefill_fp32_of_peak"] = round(pf["fp32"]["gflops"] / max(peaks["torch_fp32"], peaks["ort_fp32"]), 2)
    if "int8" in pf:
        out["prefill_int8_of_peak"] = round(pf["int8"]["gflops"] / max(peaks["torch_int8"], peaks["ort_int8_dynamic"]), 2)
    return out


def print_table(res: dict[str, Any]) -> None:
    print(f"\n{res['model']}  threads={res['threads']}  trials={res['trials']}  load {res['load_avg_start']} → "
          f"{res['load_avg_end']}", file=sys.stderr)
    print(f"{'workload':8} {'system':40} {'median s':>9} {'p95 s':>8} {'computed':>9} {'logical':>8} {'GFLOP/s':>8}",
          file=sys.stderr)
    for wl, systems in res["results"].items():
        for name, r in systems.items():
            if "median_s" not in r:
                continue
            print(f"{wl:8} {name:40} {r['median_s']:9.3f} {r.get('p95_s', float('nan')):8.3f} "
                  f"{r.get('tokens_computed', ''):>9} {r.get('tokens_logical', ''):>8} {r.get('prefill_gflops', ''):>8}",
                  file=sys.stderr)
    for wl, entry in res.get("interleaved", {}).items():
        medians = {k: round(v["median_s"], 3) for k, v in entry.items() if isinstance(v, dict) and "median_s" in v}
        print(f"{wl:8} interleaved medians {medians}, peer/ours per round {entry['ratio_per_round']}", file=sys.stderr)
    print("prefill", res.get("prefill"), "\npeaks", res.get("matmul_peaks_gflops"), "\nrss MB", res.get("peak_rss_mb"),
          "\nskipped", res.get("skipped"), file=sys.stderr)
