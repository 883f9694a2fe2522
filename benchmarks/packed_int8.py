"""INT8 (per-token activations) with tree blocks forced: A alone vs in company (td_invariance), and packed vs unpacked.

    python benchmarks/packed_int8.py FP32_EXPORT_DIR INT8_EXPORT_DIR

Prints JSON (docs/benchmarks.md, "Tree blocks").
"""
import json
import sys

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests"))
from td_invariance import A, deviations, request, vector

from typed_decisions.decider import Decider

out = {}
for path, tag in ((sys.argv[1], "fp32"), (sys.argv[2], "int8")):
    packed = Decider.from_dir(path, threads=2, packed=True)
    unpacked = Decider.from_dir(path, threads=2, packed=False)
    out[f"{tag}/packed/deviations"] = deviations(packed)
    out[f"{tag}/unpacked/deviations"] = deviations(unpacked)
    a = vector(packed.run_many([request(A)], use_cache=False)[0])
    b = vector(unpacked.run_many([request(A)], use_cache=False)[0])
    out[f"{tag}/A_alone_packed_vs_unpacked"] = float(np.abs(a - b).max())
print(json.dumps(out, indent=1))
