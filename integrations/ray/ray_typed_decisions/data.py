"""Ray Data batch labelling: the same typed questions about every row of a dataset.

``serve.py`` answers online requests; this module labels tables offline::

    Dataset ─ map_batches(Labeller, compute=ActorPoolStrategy(size=concurrency)) ─▶ Dataset
              each actor loads one Decider (ONNX Runtime threads = its num_cpus) and answers a
              batch of rows with ONE ``run_many`` (shared prefixes computed once)

The output is the input's columns followed by the answer columns of ``columns.py`` (a fixed schema
from the questions alone). Row order follows Ray Data's (not the input's unless
``DataContext.execution_options.preserve_order`` is set): keep an id column to join on.

Faults: Ray Data runs the actors with ``max_restarts=-1`` and their tasks with
``max_task_retries=-1`` (ray/data/_internal/execution/operators/actor_pool_map_operator.py), so an
actor that dies mid-batch (killed, out of memory) is restarted, reloads its model, and the batch is
run again; the dead attempt's output never reached the object store, so no row is lost or doubled
(tests/integrations/ray/test_ray_data.py kills one). A row the model cannot answer (a state over
the token limit, a null state) does not fail its batch: its answer columns are null and
``td_error`` names the error. Anything else (a bug, a missing file) fails the task, which Ray retries.

>>> import ray                                                               # doctest: +SKIP
>>> ds = ray.data.read_parquet("tickets.parquet")                           # doctest: +SKIP
>>> out = label_dataset(ds, {"urgent": {"type": "noul", "instructions": "Urgent?"}},
...                     "~/.cache/typed-decisions/exports/tiny", concurrency=2)  # doctest: +SKIP
>>> out.write_parquet("labelled/")                                          # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from ray.data import ActorPoolStrategy, Dataset

from typed_decisions.compiler import LabelMode
from typed_decisions import parse_request
from typed_decisions.errors import InvalidRequestError, TypedDecisionsError
from typed_decisions.schema import DecisionResponse, Question

from .columns import answer_columns, output_schema
from .serve import resolve_model


def parse_questions(questions: Mapping[str, Any]) -> dict[str, Question]:
    """Wire questions validated once, before any work (errors name ``questions.<name>...``)."""
    if not isinstance(questions, Mapping) or not questions:
        raise InvalidRequestError("questions must be a non-empty object {name: question}", ("questions",))
    return dict(parse_request({"model": "-", "state": "-", "questions": dict(questions)}).questions)


class Labeller:
    """A callable class for ``map_batches``: loads one ``Decider`` per actor, labels Arrow batches.

    Args:
        model: export directory or catalogue name (readable on every node running an actor).
        questions: wire questions ``{name: {"type": ..., ...}}``.
        text_column: the column holding each row's state (text, or a JSON object / list).
        threads: ONNX Runtime intra-op threads (the actor's ``num_cpus``).
        label_mode, max_tokens: as ``Decider``'s.
    """

    def __init__(self, model: str, questions: Mapping[str, Any], text_column: str, *, threads: int = 1,
                 label_mode: LabelMode = "auto", max_tokens: int | None = None):
        from typed_decisions import Decider

        self.questions = parse_questions(questions)
        self.wire = {n: q.model_dump(mode="json", exclude_none=True) for n, q in self.questions.items()}
        self.text_column = text_column
        self.decider = Decider.load(model, threads=threads, label_mode=label_mode, max_tokens=max_tokens)

    def _answer(self, states: list[Any]) -> list[DecisionResponse | BaseException]:
        """ONE ``run_many`` for the batch; if a row fails, rows one by one so it fails alone."""
        requests = [{"model": self.decider.name, "state": s, "questions": self.wire} for s in states]
        try:
            return list(self.decider.run_many(requests))
        except TypedDecisionsError:
            pass
        results: list[DecisionResponse | BaseException] = []
        for request in requests:
            try:
                results.append(self.decider.run(request))
            except TypedDecisionsError as e:
                results.append(e)
        return results

    def __call__(self, batch: pa.Table) -> pa.Table:
        schema = output_schema(batch.schema, self.questions)
        cols = answer_columns(self.questions, self._answer(batch.column(self.text_column).to_pylist()))
        arrays = [*batch.columns, *(pa.array(cols[f.name], f.type) for f in list(schema)[batch.num_columns:])]
        return pa.Table.from_arrays(arrays, schema=schema)


def label_dataset(ds: Dataset, questions: Mapping[str, Any], model: str, *, text_column: str = "text",
                  batch_size: int = 32, concurrency: int = 1, num_cpus: float = 1.0,
                  label_mode: LabelMode = "auto", max_tokens: int | None = None) -> Dataset:
    """``ds`` with typed answer columns for ``questions`` (schema: ``columns.py``), lazily.

    Checked before any work: the questions (``InvalidRequestError`` naming the field), the text
    column and clashes with the answer columns (from ``ds.schema()``, which may read one block).
    ``concurrency`` actors each reserve ``num_cpus`` CPUs and run ONNX Runtime with
    ``floor(num_cpus)`` threads; ``batch_size`` rows go to one ``run_many``.
    """
    parsed = parse_questions(questions)
    if batch_size < 1 or concurrency < 1 or num_cpus < 1:
        raise ValueError("batch_size and concurrency must be >= 1 and num_cpus >= 1 "
                         f"(got {batch_size}, {concurrency}, {num_cpus})")
    schema = ds.schema()
    names = list(schema.names) if schema is not None else []
    if text_column not in names:
        raise InvalidRequestError(f"the dataset has no column {text_column!r} (columns: "
                                  f"{', '.join(names) or 'none'}); pass text_column=", ("text_column",))
    output_schema(pa.schema([pa.field(n, pa.null()) for n in names]), parsed)  # clashes, now
    wire = {n: q.model_dump(mode="json", exclude_none=True) for n, q in parsed.items()}
    return ds.map_batches(
        Labeller, batch_size=batch_size, batch_format="pyarrow", num_cpus=num_cpus,
        compute=ActorPoolStrategy(size=concurrency), udf_modifying_row_count=False,
        fn_constructor_args=(resolve_model(model), wire, text_column),
        fn_constructor_kwargs={"threads": max(1, math.floor(num_cpus)), "label_mode": label_mode,
                               "max_tokens": max_tokens})


__all__ = ["Labeller", "label_dataset", "parse_questions"]
