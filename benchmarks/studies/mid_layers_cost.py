"""What the mid-layer outputs (``hidden_state.{k}``, docs/FORMAT.md) cost a prefill: the export's
graph against its twin without them (the same weights file, the outputs and their Identity nodes
removed), one ``Backbone.run_blocks`` each, interleaved. Prints one JSON line and writes the
schema-1 result (results/mid_layers_cost/...).

    python -m benchmarks.studies.mid_layers_cost --model tiny --rounds 40

Two shapes: a prefill (1 row of ``--tokens`` from an empty past) and suffix steps (8 rows of 24
tokens after a ``--tokens`` past, the question and label runs). The twin shows the whole cost:
the copies out of ONNX Runtime ((B, S, H) float32 per mid layer) and any fusion the extra graph
outputs prevent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness
from typed_decisions.artifacts import load_artifacts, sha256_file
from typed_decisions.engine.backbone import Backbone
from typed_decisions.engine.kv import KVRows
from typed_decisions.engine.tree_block import chain
from typed_decisions.exports import locate


def without_mid_layers(export: Path, out: Path, *, link: bool = True) -> Path:
    """A twin of ``export`` in ``out`` whose graph has no ``hidden_state.*`` outputs: model.onnx
    rewritten, the other files hard-linked (copied across file systems: ONNX Runtime refuses
    external data behind a symlink that leaves the directory), the manifest's ``hidden_layers``
    emptied and its model.onnx hash updated. What a builder export made with ``--hidden-layers
    none`` would be, without exporting again. ``link=False`` copies: onnx's checker refuses external
    data with several hard links, so a twin that lives on beside the export must not share its files."""
    import onnx

    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((export / "manifest.json").read_text())
    onnx_file = manifest["onnx_file"]
    model = onnx.load(str(export / onnx_file), load_external_data=False)
    mids = {o.name for o in model.graph.output if o.name.startswith("hidden_state.")}
    kept = [o for o in model.graph.output if o.name not in mids]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    nodes = [n for n in model.graph.node if not set(n.output) & mids]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(out / onnx_file))
    for name in manifest["files"]:
        if name != onnx_file and not (out / name).exists():
            try:
                if not link:
                    raise OSError("copy asked for")
                os.link(export / name, out / name)
            except OSError:
                shutil.copyfile(export / name, out / name)
    manifest["hidden_layers"] = []
    manifest["files"] = {**manifest["files"], onnx_file: sha256_file(out / onnx_file)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def _suffix_past(bb: Backbone, tokens: list[int], rows: int) -> KVRows:
    """``rows`` copies of one prefix's KV (the shared state before its questions)."""
    _, present = bb.run_blocks([chain(tokens)], bb.empty(1))
    rep = lambda a: np.repeat(a, rows, axis=0)  # noqa: E731
    return KVRows([rep(k) for k in present.keys], [rep(v) for v in present.values], rep(present.mask),
                  rep(present.next_pos))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="export directory or catalogue name")
    p.add_argument("--tokens", type=int, default=256, help="prefill length, and the suffix steps' past")
    p.add_argument("--rounds", type=int, default=40)
    args = harness.common_args(p).parse_args(argv)
    load_start = os.getloadavg()
    export = locate(args.model)
    with tempfile.TemporaryDirectory(dir=export.parent, prefix=".mid-layers-cost-") as tmp:  # links: same disk
        twin = without_mid_layers(export, Path(tmp) / "twin")
        artifacts = load_artifacts(export)
        with_bb = Backbone(artifacts, threads=args.threads)
        bare_bb = Backbone(load_artifacts(twin), threads=args.threads)
        if not with_bb.hidden_layers:
            raise SystemExit(f"{export} has no mid-layer outputs to measure")
        rng = np.random.default_rng(0)
        ids = rng.integers(100, 20000, args.tokens).tolist()
        suffixes = [rng.integers(100, 20000, 24).tolist() for _ in range(8)]
        pasts = {"with": _suffix_past(with_bb, ids, 8), "without": _suffix_past(bare_bb, ids, 8)}
        results = {}
        for shape, call in (("prefill", lambda bb, _: bb.run_blocks([chain(ids)], bb.empty(1))),
                            ("suffix_steps", lambda bb, past: bb.run_blocks([chain(s) for s in suffixes], past))):
            times, outs = harness.interleaved({"with": lambda: call(with_bb, pasts["with"]),
                                               "without": lambda: call(bare_bb, pasts["without"])}, args.rounds)
            assert np.array_equal(outs["with"][0], outs["without"][0]), "the twin computes other numbers"
            ratios = harness.round_ratios(times["with"], times["without"])
            hidden, present = outs["with"]
            results[shape] = {"median_s": {k: float(np.median(v)) for k, v in times.items()},
                              # what the outputs add to the copies out of ONNX Runtime, beside the KV's
                              "mid_layer_bytes": len(with_bb.hidden_layers) * hidden.nbytes,
                              "present_bytes": present.nbytes - present.mask.nbytes,
                              "with_over_without_median": round(float(np.median(ratios)), 4),
                              "with_over_without_iqr": [round(float(q), 4) for q in np.percentile(ratios, [25, 75])]}
        res = {"hidden_layers": list(with_bb.hidden_layers), "tokens": args.tokens, "rounds": args.rounds,
               "threads": args.threads, **results}
    print(json.dumps(res))
    harness.write_result("mid_layers_cost", artifacts.name, res, out=args.out, load_avg_start=load_start,
                         command=harness.command("benchmarks.studies.mid_layers_cost", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
