"""INT8 variants of a float32 export: drift (three ways of running a prompt) and prefill time.

Not part of the package: the measurements behind docs/export.md (INT8, SmoothQuant); the variants
the exporter does not write come from int8_variants.py beside it. One model
session at a time (the float32 1.5B session holds ~6 GB); run it niced on a shared machine.

    # drift of variants ALPHA:KEEP[:token|tensor[:a7w8|a8w7]] ('none' = down_proj float32,
    # 'ones' = s = 1; activations per token (default) or per tensor; integer format), each vs float32
    python export/studies/int8_study.py drift FP32_DIR WORK none:0 0.5:0:token 0.5:0:token:a8w7 0.5:0:token:a7w8:norms 0.5:0:tensor ...
    # prefill of one ~370-token prompt, 2 threads, 1 warm-up then median of 3, graphs in this order
    python export/studies/int8_study.py prefill FP32_DIR GRAPH.onnx [GRAPH.onnx ...]

`drift` measures each variant on the 8 drift PROBES plus 12 held-out questions (HELD, never used
for choosing anything in typed_decisions_export.int8), each run alone, in one right-padded batch
per set, and as
prefix + 3-token cached step; float32 is run once (alone: it depends on neither batching nor
caching, <= 2e-6) and cached with the calibration maxima in WORK/cache.npz. It prints, per variant,
the mean and max over prompts of max |dp| for each mode and over all 60 measurements, plus the
official gate (8 probes, alone). Variants are built with the package's own functions
(smoothquant.plan_smoothing, int8_variants.quantize_matmuls_study) into WORK/m.onnx and removed
afterwards.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import typed_decisions_export.int8.smoothquant as sq
from typed_decisions.cpu import cpu_class
from typed_decisions.quantized import EXACT_CLASSES
from typed_decisions_export.int8 import drift as dr
from typed_decisions_export.int8.integer import EXACT_EVERYWHERE_FORMAT, TOKEN_FORMAT, IntegerFormat
from typed_decisions_export.int8.u8u8 import write_u8u8_graph

from int8_variants import float_channels, quantize_matmuls_study  # beside this script

FORMATS = {"a7w8": IntegerFormat(63, 127), "a8w7": EXACT_EVERYWHERE_FORMAT,
           "a8w8": TOKEN_FORMAT}  # a8w8's u8·s8 graph is exact only on VNNI/AMX: elsewhere its u8·u8 twin runs
from typed_decisions_export.ort_backbone import OrtBackbone
from typed_decisions_export.tokenizer_files import candidate_ids, encode_prompt, render_chat

HELD = [
    "Which animal is a mammal? A) shark B) dolphin C) trout D) eagle E) frog",
    "What is 15 plus 27? A) 32 B) 40 C) 42 D) 52 E) 43",
    "Which metal is liquid at room temperature? A) iron B) copper C) mercury D) silver E) zinc",
    "Which Python keyword defines a function? A) func B) def C) function D) lambda E) fn",
    "What is the capital of Japan? A) Beijing B) Seoul C) Bangkok D) Tokyo E) Osaka",
    "Which data structure is first-in first-out? A) stack B) tree C) queue D) heap E) graph",
    "How many days are in a leap year? A) 364 B) 365 C) 366 D) 367 E) 360",
    "Which color do you get by mixing blue and yellow? A) red B) purple C) orange D) green E) brown",
    "Which SQL statement removes rows from a table? A) DROP B) DELETE C) REMOVE D) ERASE E) CUT",
    "Which organ pumps blood through the body? A) lungs B) liver C) heart D) kidney E) brain",
    "What is the binary representation of 5? A) 100 B) 110 C) 111 D) 101 E) 011",
    "Which planet is known as the Red Planet? A) Jupiter B) Venus C) Saturn D) Mars E) Neptune",
]


def _setup(fp32_dir: Path):
    manifest = json.loads((fp32_dir / "manifest.json").read_text())
    facts, arch = manifest["tokenizer"], manifest["architecture"]
    tok = dr.probe_tokenizer(fp32_dir, facts)
    lm_head = np.load(fp32_dir / "lm_head.npy", mmap_mode="r")
    cands = candidate_ids(tok, dr.CANDIDATE_TEXTS, fallback_vocab=lm_head.shape[0])

    def enc(texts, system):
        return [encode_prompt(tok, render_chat(tok, t, system), facts["add_bos_token"]) for t in texts]

    probe = dr.Probe(lm_head, cands, arch, facts["pad_token_id"] if facts["pad_token_id"] is not None else 0)
    return tok, facts, enc, probe


def drift(fp32_dir: Path, work: Path, specs: list[str]) -> None:
    src = fp32_dir / "model.onnx"
    work.mkdir(parents=True, exist_ok=True)
    _, _, enc, probe = _setup(fp32_dir)
    probes, held = enc(dr.PROBES, dr.PROBE_SYSTEM), enc(HELD, dr.PROBE_SYSTEM)
    calib = enc(sq.CALIBRATION, sq.CALIBRATION_SYSTEM)
    cache = work / "cache.npz"
    if cache.exists():
        z = dict(np.load(cache))
    else:
        ort = OrtBackbone(src)
        z = {"p32": probe.alone(ort, probes), "h32": probe.alone(ort, held)}
        del ort
        gc.collect()
        pairs, _ = sq.smoothing_pairs(src)
        xs = [p["x"] for p in pairs] + [t["x"] for t in sq.norm_sites(src)]
        z |= {"am_" + k: v for k, v in sq.activation_absmax(src, xs, calib, log=print).items()}
        np.savez(cache, **z)
    absmax = {k[3:]: v for k, v in z.items() if k.startswith("am_")}
    ref = np.concatenate([z["p32"], z["h32"]])  # (20, K)
    sq.activation_absmax = lambda *a, **k: absmax  # calibrated once for all variants
    plain_sv = sq.smoothing_vector
    for spec in specs:
        alpha, keep, *rest = spec.split(":")
        norms = "norms" in rest
        fcd = next((int(r[3:]) for r in rest if r.startswith("fcd")), 0)  # down_proj inputs: float32 channels
        fcn = next((int(r[3:]) for r in rest if r.startswith("fcn")), 0)  # inputs after each RMSNorm
        lvl2 = "lvl2" in rest  # down_proj inputs as two per-token levels (two integer GEMMs)
        rest = [r for r in rest if r not in ("norms", "lvl2") and not r.startswith("fc")]
        activations = f"per_{rest[0]}" if rest else "per_token"
        fmt = FORMATS[rest[1]] if len(rest) > 1 else FORMATS["a7w8"]
        sq.smoothing_vector = plain_sv
        if alpha == "ones":  # down_proj quantized without smoothing
            sq.smoothing_vector = lambda a, w, al: np.ones_like(np.asarray(a, np.float64))
        t0 = time.perf_counter()
        if alpha == "none":
            float_nodes, rows, cols, smoothed_inputs = sq.excluded_nodes(src)[0], {}, {}, []
        else:
            plan = sq.plan_smoothing(src, 0.5 if alpha == "ones" else float(alpha), calib, int(keep),
                                      log=lambda m: None, norms=norms)
            rows, cols, float_nodes, smoothed_inputs = plan.scale_rows, plan.scale_cols, plan.float_nodes, plan.smoothed_inputs
        channels = {}
        if fcd:
            for p in sq.smoothing_pairs(src)[0]:  # the smoothed input is x / s: x * (up's column factor)
                channels[p["x"]] = float_channels(absmax[p["x"]] * cols.get(p["up_weight"], 1.0), fcd)
        if fcn:
            for t in sq.norm_sites(src):
                channels[t["x"]] = float_channels(absmax[t["x"]] * rows.get(t["gamma"], 1.0), fcn)
        two_level = set(smoothed_inputs) if lvl2 else set()  # the quantized down_proj inputs
        quantize_matmuls_study(src, work / "m.onnx", exclude=set(float_nodes), scale_rows=rows, scale_cols=cols,
                               activations=activations, fmt=fmt, float_channels=channels, two_level=two_level,
                               log=lambda m: None)
        graph = work / "m.onnx"
        if fmt is TOKEN_FORMAT and cpu_class() not in EXACT_CLASSES:
            # 8-bit weights saturate the u8·s8 kernel here: run the u8·u8 twin the runtime would load
            write_u8u8_graph(graph, work / "m.u8u8.onnx")
            graph = work / "m.u8u8.onnx"
        ort = OrtBackbone(graph)
        tables = {
            "alone": np.concatenate([probe.alone(ort, probes), probe.alone(ort, held)]),
            "batched": np.concatenate([probe.batched(ort, probes), probe.batched(ort, held)]),
            "cached": probe.cached(ort, probes + held),
        }
        del ort
        gc.collect()
        (work / "m.onnx").unlink()
        (work / "m.onnx.data").unlink()
        (work / "m.u8u8.onnx").unlink(missing_ok=True)
        dp = {mode: np.abs(t - ref).max(axis=1) for mode, t in tables.items()}  # (20,) each
        every = np.concatenate(list(dp.values()))
        gate = dr.compare(ref[: len(probes)], tables["alone"][: len(probes)])
        parts = [f"{m}: mean {v.mean():.4f} max {v.max():.3f} flips {dr.compare(ref, tables[m])['top1_flips']}" for m, v in dp.items()]
        print(f"{spec}: gate (8 probes alone) max {gate['max_abs_prob']:.3f} flips {gate['top1_flips']} "
              f"decisive {gate['decisive_flips']} | held-out alone max {dp['alone'][len(probes):].max():.3f} | "
              f"all 60 mean {every.mean():.4f} max {every.max():.3f} | " + " | ".join(parts)
              + f" | float32 down_proj {len(float_nodes)} | {graph.name} on {cpu_class()} | {time.perf_counter() - t0:.0f} s",
              flush=True)


def prefill(fp32_dir: Path, graphs: list[Path], threads: int = 2) -> None:
    _, _, enc, _ = _setup(fp32_dir)
    state = " ".join(sq.CALIBRATION[:4]) + " " + " ".join(dr.PROBES[:4])
    ids = enc([state], dr.PROBE_SYSTEM)[0]
    print(f"prompt: {len(ids)} tokens, {threads} threads", flush=True)
    for path in graphs:
        t0 = time.perf_counter()
        ort = OrtBackbone(path, threads=threads)
        load = time.perf_counter() - t0
        ort.prefill(ids)  # warm-up
        wall = []
        for _ in range(3):
            t0 = time.perf_counter()
            ort.prefill(ids)
            wall.append(time.perf_counter() - t0)
        print(f"{path}: load {load:.1f} s, prefill median {statistics.median(wall):.3f} s {[round(w, 3) for w in wall]}", flush=True)
        del ort
        gc.collect()


if __name__ == "__main__":
    cmd, fp32 = sys.argv[1], Path(sys.argv[2]).expanduser()
    if cmd == "drift":
        drift(fp32, Path(sys.argv[3]), sys.argv[4:])
    elif cmd == "prefill":
        prefill(fp32, [Path(p).expanduser() for p in sys.argv[3:]])
    else:
        raise SystemExit(__doc__)
