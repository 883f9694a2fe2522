"""``typed-decisions serve --ray`` and ``typed-decisions label``: the Ray commands.

The runtime's CLI (``typed_decisions/cli.py``) imports this module only for these two commands,
so ``typed-decisions`` never imports Ray otherwise.

``serve --ray`` takes every flag of ``typed-decisions serve`` plus the Ray ones, and runs the
Serve application of ``serve.py`` (Serve's HTTP proxy on ``--host``/``--port``) until Ctrl-C.

``label`` labels a table file (jsonl, csv or parquet) into a directory of parquet parts::

    OUT/_job.json          model, questions, input, shard size: a rerun must match it
    OUT/part-00000.parquet rows 0 … shard_rows-1 with the answer columns (columns.py)
    ...

Each shard of ``--shard-rows`` input rows goes through ``label_dataset`` (Ray Data, actors) and is
written to a temporary name, then renamed: a part exists only when complete, so a rerun after an
interruption skips the parts that exist and computes the rest (``--overwrite`` starts over).
Everything that can be checked without a model (the question file, the input's columns, a
previous job with other settings) is checked before Ray starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from typed_decisions.errors import InvalidRequestError
from typed_decisions.schema import json_sha256

JOB_FILE = "_job.json"


# --------------------------------------------------------------------------- serve --ray


def _serve_parser() -> argparse.ArgumentParser:
    from typed_decisions.server import serve_parser

    p = serve_parser()
    p.prog = "typed-decisions serve --ray"
    g = p.add_argument_group("Ray Serve (typed-decisions-ray)")
    g.add_argument("--ray", action="store_true", help="serve on a Ray cluster (this mode)")
    scale = g.add_mutually_exclusive_group()
    scale.add_argument("--replicas", type=int, default=None, help="fixed number of Decider replicas (default 1)")
    scale.add_argument("--autoscale", metavar="MIN:MAX", default=None,
                       help="autoscale the Decider replicas between MIN and MAX")
    g.add_argument("--address", default=None,
                   help="Ray cluster to join: 'auto' (a local `ray start --head`), ray://HOST:10001 "
                        "(Ray Client) or HOST:6379; default: start a local cluster in this process")
    g.add_argument("--num-cpus-per-replica", type=float, default=None,
                   help="CPUs each Decider replica reserves = its ONNX Runtime threads (default: --threads or 1)")
    g.add_argument("--no-affinity", action="store_true",
                   help="Serve's default router instead of routing each state to one replica")
    return p


def parse_autoscale(text: str) -> dict[str, int]:
    """``"1:4"`` → Serve's autoscaling bounds.

    >>> parse_autoscale("1:4")
    {'min_replicas': 1, 'max_replicas': 4}
    """
    lo, sep, hi = text.partition(":")
    if not sep or not lo.isdigit() or not hi.isdigit() or int(lo) > int(hi) or int(hi) < 1:
        raise InvalidRequestError(f"--autoscale must be MIN:MAX with 0 <= MIN <= MAX, MAX >= 1 (got {text!r})",
                                  ("autoscale",))
    return {"min_replicas": int(lo), "max_replicas": int(hi)}


def main_serve(argv: list[str]) -> int:
    """``typed-decisions serve --ray ...``: deploy, then block until Ctrl-C."""
    args = _serve_parser().parse_args(argv)
    from typed_decisions.exports import locate
    from typed_decisions.server import check_exposure, settings_from_args

    for flag, value, default in (("--debias", args.debias, "none"), ("--wording", args.wording, "default")):
        if value != default:  # not passed to the replicas yet: refuse rather than ignore
            print(f"typed-decisions serve --ray: {flag} {value} is not supported with --ray (requests may "
                  "still carry their own 'debias' field)", file=sys.stderr)
            return 2
    settings = settings_from_args(args)
    try:  # the same rule as `typed-decisions serve`: no anonymous access beyond loopback
        check_exposure(args.host, settings)
    except ValueError as e:
        print(f"typed-decisions serve --ray: {e}", file=sys.stderr)
        return 2
    options: dict[str, Any] = {
        "num_cpus_per_replica": args.num_cpus_per_replica or args.threads or 1,
        "affinity": not args.no_affinity, "settings": settings, "label_mode": args.labels,
        "max_tokens": int(args.max_prompt_tokens) if args.max_prompt_tokens else None}
    if args.autoscale:
        options["autoscaling_config"] = parse_autoscale(args.autoscale)
    else:
        options["num_replicas"] = args.replicas or 1
    from .serve import build_app

    app = build_app(locate(args.model), **options)  # validated before Ray starts
    import ray
    from ray import serve

    ray.init(address=args.address, log_to_driver=True)
    serve.start(http_options={"host": args.host, "port": args.port})
    print(f"typed-decisions serve --ray: http://{args.host}:{args.port}/v1/systemone "
          f"(Ctrl-C stops the application)", file=sys.stderr, flush=True)
    try:
        serve.run(app, name="typed-decisions", route_prefix="/", blocking=True)
    except KeyboardInterrupt:
        print("typed-decisions serve --ray: stopping", file=sys.stderr, flush=True)
        serve.shutdown()
    return 0


# --------------------------------------------------------------------------- label


def _label_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="typed-decisions label", description=(
        "Label every row of a table with typed answers on a Ray cluster (Ray Data actors); "
        "the output directory of parquet parts is resumable."))
    p.add_argument("--model", required=True, help="export directory or catalogue name (on every node)")
    p.add_argument("--questions", type=Path, required=True, help='JSON file {"name": {"type": ..., ...}}')
    p.add_argument("--input", type=Path, required=True, help="a .jsonl, .csv or .parquet file")
    p.add_argument("--output", type=Path, required=True, help="output directory (parquet parts)")
    p.add_argument("--text-column", default="text", help="column holding each row's state (default: text)")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join (default: a local one)")
    p.add_argument("--concurrency", type=int, default=1, help="actors (each holds one model)")
    p.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per actor = its ONNX Runtime threads")
    p.add_argument("--batch-size", type=int, default=32, help="rows per engine call")
    p.add_argument("--shard-rows", type=int, default=10_000, help="rows per output part (the unit of resume)")
    p.add_argument("--overwrite", action="store_true", help="discard an existing output and start over")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def read_table(path: Path) -> Any:
    """A jsonl / csv / parquet file as a pyarrow Table (by its suffix)."""
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet

    readers = {".jsonl": pyarrow.json.read_json, ".json": pyarrow.json.read_json,
               ".csv": pyarrow.csv.read_csv, ".parquet": pyarrow.parquet.read_table}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise InvalidRequestError(f"--input {path}: expected a .jsonl, .csv or .parquet file", ("input",))
    if not path.is_file():
        raise InvalidRequestError(f"--input {path}: no such file", ("input",))
    return reader(path)


def _load_questions(path: Path) -> dict[str, Any]:
    from .data import parse_questions

    try:
        questions = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InvalidRequestError(f"--questions {path}: {e.strerror}", ("questions",)) from None
    except ValueError as e:
        raise InvalidRequestError(f"--questions {path} is not valid JSON: {e}", ("questions",)) from None
    return {n: q.model_dump(mode="json", exclude_none=True) for n, q in parse_questions(questions).items()}


def _check_job(out: Path, job: dict[str, Any], overwrite: bool) -> None:
    """Refuse to mix parts of another job into ``out``; start over with ``overwrite``."""
    marker = out / JOB_FILE
    if overwrite and out.exists():
        for part in out.glob("part-*.parquet"):
            part.unlink()
        marker.unlink(missing_ok=True)
    if marker.is_file():
        old = json.loads(marker.read_text())
        if old != job:
            diff = sorted(k for k in job if old.get(k) != job[k])
            raise InvalidRequestError(f"--output {out} holds a job with other {', '.join(diff)}; "
                                      "use another --output, or --overwrite to start over", ("output",))
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(job, indent=2, sort_keys=True))


def main_label(argv: list[str]) -> int:
    """``typed-decisions label``: check everything, then label the missing parts."""
    args = _label_parser().parse_args(argv)
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from typed_decisions.exports import locate

    from .columns import output_schema
    from .data import parse_questions

    questions = _load_questions(args.questions)
    table = read_table(args.input)
    if args.text_column not in table.column_names:
        raise InvalidRequestError(f"--input {args.input} has no column {args.text_column!r} (columns: "
                                  f"{', '.join(table.column_names)}); pass --text-column", ("text_column",))
    output_schema(table.schema, parse_questions(questions))  # answer columns clash with input ones?
    if args.shard_rows < 1:
        raise InvalidRequestError("--shard-rows must be >= 1", ("shard_rows",))
    model = str(locate(args.model).resolve()) if Path(args.model).expanduser().exists() else args.model
    job = {"model": model, "questions_sha256": json_sha256(questions), "input": str(args.input.resolve()),
           "rows": table.num_rows, "shard_rows": args.shard_rows, "text_column": args.text_column}
    _check_job(args.output, job, args.overwrite)
    starts = range(0, table.num_rows, args.shard_rows)
    todo = [s for s in starts if not (args.output / f"part-{s // args.shard_rows:05d}.parquet").is_file()]
    print(f"typed-decisions label: {len(starts) - len(todo)} of {len(starts)} parts done, "
          f"{len(todo)} to go", file=sys.stderr, flush=True)
    if not todo:
        return 0

    import ray

    from .data import label_dataset

    if not ray.is_initialized():
        ray.init(address=args.ray_address, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True  # a part's rows in the input's order
    bar = tqdm(total=table.num_rows, initial=table.num_rows - sum(min(args.shard_rows, table.num_rows - s)
                                                                    for s in todo),
               unit="rows", disable=args.quiet, desc="label")
    for start in todo:
        shard = table.slice(start, args.shard_rows)
        labelled = label_dataset(ray.data.from_arrow(shard), questions, model, text_column=args.text_column,
                                 batch_size=args.batch_size, concurrency=args.concurrency, num_cpus=args.num_cpus)
        result = pa.concat_tables(ray.get(labelled.to_arrow_refs()))
        if result.num_rows != shard.num_rows:  # never silently short: Ray retried, the count must hold
            raise RuntimeError(f"part at row {start}: {result.num_rows} rows labelled of {shard.num_rows}")
        final = args.output / f"part-{start // args.shard_rows:05d}.parquet"
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        pq.write_table(result, tmp)
        tmp.rename(final)
        bar.update(shard.num_rows)
    bar.close()
    return 0


__all__ = ["JOB_FILE", "main_label", "main_serve", "parse_autoscale", "read_table"]
