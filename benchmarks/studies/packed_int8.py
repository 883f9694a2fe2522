"""INT8 (per-token activations) with tree blocks forced: request A alone vs in company
(benchmarks/invariance.py's ``deviations``), and A alone packed vs unpacked, on a float32 and an
INT8 export.

    python -m benchmarks.studies.packed_int8 FP32_EXPORT_DIR INT8_EXPORT_DIR [--threads 2] [--out FILE]

Prints JSON and writes it as a schema-1 result (results/packed_int8/...). The results of
2026-12-02 (one block holding several requests: up to 0.086; per-request blocks: 0.0) are in
results/packed_int8/.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.invariance import A, deviations, request, vector
from typed_decisions.decider import Decider


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("fp32", type=Path)
    p.add_argument("int8", type=Path)
    args = harness.common_args(p).parse_args(argv)
    load_start = os.getloadavg()
    out = {}
    for path, tag in ((args.fp32, "fp32"), (args.int8, "int8")):
        packed = Decider.load(path, threads=args.threads, packed=True)
        unpacked = Decider.load(path, threads=args.threads, packed=False)
        out[f"{tag}/packed/deviations"] = deviations(packed)
        out[f"{tag}/unpacked/deviations"] = deviations(unpacked)
        a = vector(packed.run_many([request(A)], use_cache=False)[0])
        b = vector(unpacked.run_many([request(A)], use_cache=False)[0])
        out[f"{tag}/A_alone_packed_vs_unpacked"] = float(np.abs(a - b).max())
        name = packed.name
    print(json.dumps(out, indent=1))
    harness.write_result("packed_int8", name, out, command=harness.command("benchmarks.studies.packed_int8", argv),
                         out=args.out, load_avg_start=load_start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
