"""The two roads to an export directory, on the same model, measured with `/usr/bin/time -v`.

- export: `typed-decisions export HF_FOLDER --out own/` (torch + transformers 5, our self-check
  against transformers);
- adopt: `optimum-cli export onnx --task text-generation-with-past HF_FOLDER opt/` (Optimum's own
  venv: ``--optimum-venv``, default the one the test suite builds, tests/foreign_exports.py's
  ``optimum_venv()``, under ~/.cache/typed-decisions/optimum-venv-*), then `typed-decisions adopt opt/ --out adopted/` (no torch).

The HF folder is made from a GGUF (default: the catalogue's `tiny`, SmolLM2-135M-Instruct Q4_1,
dequantized to float32) by the Optimum venv's transformers (4.57: a folder saved by transformers 5
would spell its RoPE settings in a way 4.57 does not read). Prints wall seconds and peak RSS of each
step, the ratios adopt/export, and the largest difference between the two directories' Decider
probabilities on three requests (td_invariance's questions). The CPU class is printed too.

    .venv/bin/python -m benchmarks.studies.adopt_vs_export [--gguf PATH] [--work DIR] [--optimum-venv DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks import harness


def main() -> None:
    from typed_decisions.models import cache_dir, pull

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: catalogue 'tiny')")
    parser.add_argument("--work", type=Path, default=Path("/tmp/adopt_vs_export"))
    parser.add_argument("--optimum-venv", type=Path, default=None,
                        help="a venv with optimum-cli (default: the newest ~/.cache/typed-decisions/optimum-venv-*/venv, "
                             "built by the test suite's adopt tests)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: harness.result_path)")
    args = parser.parse_args()
    gguf = args.gguf or pull("tiny", progress=False)
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    found = sorted(cache_dir().glob("optimum-venv-*/venv"), key=lambda p: p.stat().st_mtime)
    venv = args.optimum_venv or (found[-1] if found else None)
    if venv is None or not (venv / "bin" / "optimum-cli").is_file():
        raise SystemExit("no Optimum venv: pass --optimum-venv, or run the adopt tests once "
                         "(pytest tests/export/test_adopt_optimum.py builds it)")
    py, bin_dir = str(venv / "bin" / "python"), Path(sys.executable).parent
    subprocess.run([py, "-m", "pip", "install", "-q", "gguf"], check=True)  # transformers' GGUF loader
    to_hf = (f"from transformers import AutoModelForCausalLM, AutoTokenizer; d, f = {str(gguf.parent)!r}, {gguf.name!r}; "
             f"AutoModelForCausalLM.from_pretrained(d, gguf_file=f).save_pretrained({str(work / 'hf')!r}); "
             f"AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained({str(work / 'hf')!r})")
    subprocess.run([py, "-c", to_hf], check=True, capture_output=True)

    steps = {
        "export": harness.time_v([str(bin_dir / "typed-decisions"), "export", str(work / "hf"), "--out", str(work / "own"), "--quiet"], work / "export.log"),
        "optimum": harness.time_v([str(venv / "bin" / "optimum-cli"), "export", "onnx", "--model", str(work / "hf"),
                          "--task", "text-generation-with-past", str(work / "opt")], work / "optimum.log"),
        "adopt": harness.time_v([str(bin_dir / "typed-decisions"), "adopt", str(work / "opt"), "--out", str(work / "adopted"), "--quiet"], work / "adopt.log"),
    }
    from benchmarks.invariance import A, B, C, request, vector
    from typed_decisions.decider import Decider

    own, adopted = Decider.load(work / "own"), Decider.load(work / "adopted")
    reqs = [request(s) for s in (A, B, C)]
    dp = max(float(abs(vector(x) - vector(y)).max()) for x, y in zip(own.run_many(reqs), adopted.run_many(reqs)))
    check = json.loads((work / "adopted" / "manifest.json").read_text())["self_check"]
    report = {
        "gguf": gguf.name, "steps": steps,
        "adopt_road": {"seconds": round(steps["optimum"]["seconds"] + steps["adopt"]["seconds"], 1),
                       "peak_rss_bytes": max(steps["optimum"]["peak_rss_bytes"], steps["adopt"]["peak_rss_bytes"])},
        "ratios": {"adopt_only/export seconds": round(steps["adopt"]["seconds"] / steps["export"]["seconds"], 3),
                   "adopt_only/export peak_rss": round(steps["adopt"]["peak_rss_bytes"] / steps["export"]["peak_rss_bytes"], 3),
                   "optimum+adopt/export seconds": round((steps["optimum"]["seconds"] + steps["adopt"]["seconds"]) / steps["export"]["seconds"], 3)},
        "decider_max_abs_dp_adopted_vs_export": dp,
        "adopt_self_check_worst_logits_rel": max(v["logits_rel"] for k, v in check["results"].items() if isinstance(v, dict) and "logits_rel" in v),
    }
    print(json.dumps(report, indent=2))
    harness.write_result("adopt_vs_export", gguf.stem, report, command=harness.command("benchmarks.studies.adopt_vs_export"),
                         out=args.out)


if __name__ == "__main__":
    main()
