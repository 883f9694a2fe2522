"""The graph builder against the traced export, on the same Hugging Face folder, measured with
`/usr/bin/time -v`: wall seconds and peak RSS of `typed-decisions-export FOLDER --out DIR --builder
on|off --quiet` (each includes the self-check against transformers), and the largest difference
between the two graphs' last hidden states and the two directories' Decider probabilities.

Models (small ones only: this is a 2-core shared machine): `smollm2`, the catalogue's `tiny` GGUF
(SmolLM2-135M-Instruct Q4_1) de-quantized to float32 and saved as safetensors by transformers (not
part of the timing), and any Hugging Face folder given as ``--folder NAME=PATH`` (e.g. one of the
tests' tiny random models, ``tests/export/tiny_models.py``).

    python -m benchmarks.builder_vs_traced [--work DIR] [--models smollm2] [--folder tiny-qwen2=/tmp/q]

writes benchmarks/results/builder_vs_traced/<model>-<cpuclass>-<date>.json (``harness.write_result``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from benchmarks import harness


def make_folder(model: str, folder: Path) -> Path:
    if (folder / "config.json").is_file():
        return folder
    if model != "smollm2":
        raise SystemExit(f"unknown model {model!r}: smollm2, or give its folder with --folder {model}=PATH")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from typed_decisions.models import pull

    gguf = Path(pull("tiny", progress=False))
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    from safetensors.torch import save_file

    model_ = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model loaded from GGUF: write its config and float32 state dict
    # (without the LM head when it is the tied embedding) as a plain folder
    state = model_.state_dict()
    if model_.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    model_.config.save_pretrained(folder)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/builder_vs_traced"))
    ap.add_argument("--models", default="smollm2")
    ap.add_argument("--folder", action="append", default=[], metavar="NAME=PATH",
                    help="a Hugging Face folder to measure as NAME (repeatable)")
    harness.common_args(ap, threads=None)
    args = ap.parse_args()
    load_start = os.getloadavg()
    import numpy as np
    from typed_decisions_export.ort_backbone import OrtBackbone

    from benchmarks.invariance import request, vector
    from typed_decisions.cpu import cpu_class
    from typed_decisions.decider import Decider

    print(f"CPU class {cpu_class()}, {os.cpu_count()} cores visible")
    given = dict(f.split("=", 1) for f in args.folder)
    runs = {}
    for model in [*[m for m in args.models.split(",") if m], *given]:
        folder = Path(given[model]) if model in given else make_folder(model, args.work / model / "hf")
        results = {}
        for mode in ("off", "on"):
            out = args.work / model / f"builder-{mode}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "typed_decisions_export.cli", str(folder), "--out", str(out),
                   "--builder", mode, "--quiet"]
            results[mode] = harness.time_v(cmd, args.work / model / f"builder-{mode}.log")
        a = OrtBackbone(args.work / model / "builder-on" / "model.onnx")
        b = OrtBackbone(args.work / model / "builder-off" / "model.onnx")
        ids = list(range(100, 164))
        hidden = float(np.abs(a.prefill(ids)[0] - b.prefill(ids)[0]).max())
        states = ["I was charged twice this month.", "Do you offer a discount for schools?"]
        on = Decider.load(args.work / model / "builder-on")
        off = Decider.load(args.work / model / "builder-off")
        probs = max(float(np.abs(vector(x) - vector(y)).max())
                    for x, y in zip(on.run_many([request(s) for s in states], use_cache=False),
                                    off.run_many([request(s) for s in states], use_cache=False)))
        runs[model] = {"traced": results["off"], "builder": results["on"],
                       "max_abs_hidden_64_tokens": hidden, "max_abs_decider_prob": probs}
        print(json.dumps({"model": model, **runs[model]}))
    path = harness.write_result("builder_vs_traced", "+".join(runs), runs, out=args.out, load_avg_start=load_start,
                                command=harness.command("benchmarks.builder_vs_traced"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
