"""The ``free_text`` peer and baseline: the same model, the same prompt, but generated text instead of
label logits.

The runtime never generates (typed_decisions/ has no sampling code and never imports torch), so
this baseline lives here and uses transformers + torch. For each row it builds the exact prompt the
runtime builds (the export's tokenizer and chat template, typed_decisions' Compiler, ``--labels``
mode, default ``auto`` like the engine), generates up to ``--max-new-tokens`` tokens greedily, and
maps the text to an option:

    parse(text) = the option whose shown label (name, letter, or level number) the stripped,
                  lower-cased text starts with; longest label first; otherwise "unparsed" (wrong)

Reported: accuracy, the unparsed rate, and the label-logit accuracy on the same rows when
``--report`` points at an ``eval`` report of the same dataset, split and limit, or ``--sweep-raw``
at a ``benchmarks/sweep.py`` raw file that holds at least these rows (same label mode).

    python -m benchmarks.peers.free_text --export DIR --weights GGUF_OR_HF_DIR --dataset sms-spam --limit 50

bench.py's ``free_text`` peer uses ``load_torch_model``, ``generate_text`` and ``parse_answer``. The
result file (``--out``, default results/free_text/<model>-<cpuclass>-<date>.json) has the schema of
benchmarks/harness.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks import harness
from typed_decisions.compiler import LABEL_MODES


def load_torch_model(weights: Path):
    """The same weights in transformers, float32, eval mode: a .gguf file (de-quantized) or an HF folder.
    Eager attention: the SDPA kernel on left-padded batches moved the reference's probabilities by
    up to 2.7e-4 between runs on an AMX Xeon (the oracle must not move)."""
    import torch
    from transformers import AutoModelForCausalLM

    kw = {"dtype": torch.float32, "attn_implementation": "eager"}
    if weights.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(weights.parent, gguf_file=weights.name, **kw)
    else:
        model = AutoModelForCausalLM.from_pretrained(weights, **kw)
    return model.eval()


def generate_text(model, tok, ids: list[int], max_new_tokens: int) -> str:
    """Greedy continuation of one prompt (token ids), decoded, stripped and lower-cased."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False)
    return tok.decode(out[0, len(ids):].tolist()).strip().lower()


def parse_answer(text: str, shown: list[str]) -> int | None:
    """Index of the option whose shown name the text starts with, longest name first; else None.

    >>> parse_answer("billing, because", ["bill", "billing"])
    1
    """
    order = sorted(range(len(shown)), key=lambda i: -len(shown[i]))
    return next((i for i in order if text.startswith(shown[i].lower())), None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--export", required=True, type=Path, help="exported model dir (tokenizer + chat template)")
    p.add_argument("--weights", required=True, type=Path, help="the same model for transformers: a .gguf or HF folder")
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--labels", choices=LABEL_MODES, default="auto")
    p.add_argument("--report", type=Path, default=None, help="an eval --out report to compare with")
    p.add_argument("--sweep-raw", type=Path, default=None, help="a benchmarks/sweep.py <out>.raw.json to compare with")
    p.add_argument("--out", type=Path, default=None, help="result file (default: harness.result_path)")
    args = p.parse_args(argv)

    from typed_decisions.artifacts import load_artifacts
    from typed_decisions.compiler import Compiler
    from typed_decisions.decider import parse_request
    from typed_decisions.evaluation.datasets import load_dataset
    from typed_decisions.tokenization import ChatTemplate, TextTokenizer

    art = load_artifacts(args.export, verify=False)
    tok = TextTokenizer(art.tokenizer_path, art.tokenizer_info)
    compiler = Compiler(tok, ChatTemplate(art.chat_template, tok))
    ds = load_dataset(args.dataset, args.split, args.limit)  # type: ignore[arg-type]
    spec = ds.question
    model = load_torch_model(args.weights)
    hits, unparsed, outputs = 0, 0, []
    t0 = time.perf_counter()
    for n, row in enumerate(ds.rows):
        req = parse_request(spec.row_request(art.name, row, n))
        comp = compiler.compile(req, label_mode=args.labels)
        (q,) = comp.questions
        ids = list(comp.prefix_ids + q.suffix_ids)
        text = generate_text(model, tok, ids, args.max_new_tokens)
        pred = parse_answer(text, list(q.labels))
        gold = spec.gold_index(row, n)
        unparsed += pred is None
        hits += pred == gold
        outputs.append({"text": text, "pred": pred, "gold": gold})
    n = len(ds.rows)
    res = {"dataset": args.dataset, "split": args.split, "n": n, "labels": q.label_mode,
           "accuracy": hits / n, "unparsed_rate": unparsed / n, "seconds_per_row": round((time.perf_counter() - t0) / n, 2),
           "seconds": round(time.perf_counter() - t0, 1), "max_new_tokens": args.max_new_tokens, "outputs": outputs}
    if args.report:
        rep = json.loads(args.report.read_text())
        res["label_logit_accuracy"] = rep["metrics"]["accuracy"] if rep["n"] == n else None
    if args.sweep_raw and args.split == "test":
        import numpy as np

        raw = harness.read_results(args.sweep_raw)
        cell = next((c for k, c in raw.items() if k.startswith(f"{args.dataset}/{q.label_mode}/")
                     and len(c["test"]["gold"]) >= n), None)
        if cell is not None:
            golds, probs = cell["test"]["gold"][:n], cell["test"]["probabilities"][:n]
            assert golds == [o["gold"] for o in outputs], "the sweep's rows are not these rows"
            res["label_logit_accuracy"] = float(np.mean([int(np.argmax(p)) == g for p, g in zip(probs, golds)]))
            res["agreement_with_label_logits"] = float(np.mean([int(np.argmax(p)) == o["pred"]
                                                                for p, o in zip(probs, outputs)]))
    print(json.dumps({k: v for k, v in res.items() if k != "outputs"}, indent=1))
    harness.write_result("free_text", art.name, res, command=harness.command("benchmarks.peers.free_text", argv),
                         out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
