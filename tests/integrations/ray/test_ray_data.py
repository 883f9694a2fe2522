"""Ray Data labelling on a real local Ray cluster with the tiny real model.

80 rows (8 batches of 10) through ``label_dataset`` with 2 actors, one of which is killed (SIGKILL, found by its
process title ``ray::MapWorker(MapBatches(Labeller)).submit``: it is computing a batch) during the
run: Ray restarts it and runs the batch again. The output still has exactly one row per input id,
the fixed schema of ``columns.py``, and every row's answers equal ``Decider.run_many`` in this
process within 1e-5. The rows are 10 distinct tickets, each 8 times in a row (duplicates are common in
ticket dumps, and they keep this test cheap on 2 shared cores); every row has its own id.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from td_optional import require

pytestmark = pytest.mark.model

require("ray", "bash scripts/setup.sh (installs integrations/ray[test])")

import ray  # noqa: E402
from ray_typed_decisions import label_dataset  # noqa: E402
from ray_typed_decisions.columns import answer_fields  # noqa: E402
from ray_typed_decisions.data import parse_questions  # noqa: E402

from typed_decisions.errors import InvalidRequestError  # noqa: E402

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Payments, refunds", "tech": "Bugs, outages", "sales": "Plans"}},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "severity": {"type": "score", "criteria": ["low", "medium", "high"]},
}
ROWS = 80  # 8 batches of 10: each of the 2 actors computes several, so one can be killed mid-run
ISSUES = ["was charged twice", "cannot log in", "wants a bigger plan", "got a broken item",
          "sees an outage", "asks for a refund", "found a bug in export", "lost the invoice",
          "needs an urgent fix", "wants to cancel"]


def _rows() -> list[dict[str, Any]]:
    texts = [f"Ticket from customer {i}: the customer {ISSUES[i % 10]} (account {i * 37})." for i in range(ROWS // 8)]
    return [{"id": i, "text": texts[i // 8]} for i in range(ROWS)]


def _worker_pids(title: str) -> list[int]:
    """Processes whose title (Ray's setproctitle, i.e. /proc/PID/cmdline) starts with ``title``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(title.encode()):
                pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def expected(tiny_decider) -> dict[str, dict[str, Any]]:
    """The oracle: the in-process Decider, one ``run_many`` for the distinct texts."""
    texts = sorted({r["text"] for r in _rows()})
    responses = tiny_decider.run_many([{"model": tiny_decider.name, "state": t, "questions": QUESTIONS}
                                       for t in texts])
    return {t: r.model_dump(mode="json")["answers"] for t, r in zip(texts, responses)}


def _check_row(row: dict[str, Any], want: dict[str, Any]) -> None:
    assert row["td_error"] is None
    assert row["team"] == want["team"]["choice"]
    assert row["team__confidence"] == pytest.approx(want["team"]["confidence"], abs=1e-5)
    for option, p in want["team"]["probabilities"].items():
        assert row[f"team__p__{option}"] == pytest.approx(p, abs=1e-5)
    assert row["urgent"] == pytest.approx(want["urgent"]["noul"], abs=1e-5)
    assert row["severity"] == pytest.approx(want["severity"]["score"], abs=1e-5)
    for level, p in want["severity"]["probabilities"].items():
        assert row[f"severity__p__{level}"] == pytest.approx(p, abs=1e-5)


def test_label_80_rows_with_2_actors_one_killed_loses_and_doubles_nothing(ray_cluster, tiny_model_dir,
                                                                           expected, record_property):
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = ray.data.from_items(_rows())
    out = label_dataset(ds, QUESTIONS, str(tiny_model_dir), concurrency=2, batch_size=10)

    result: dict[str, Any] = {}
    run = threading.Thread(target=lambda: result.update(table=out.to_arrow_refs()), daemon=True)
    t0 = time.perf_counter()
    run.start()
    killed = None
    while run.is_alive() and killed is None:  # kill the first actor seen computing a batch
        busy = _worker_pids("ray::MapWorker(MapBatches(Labeller)).submit")
        if busy:
            killed = busy[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    run.join(900)  # ~1 min on 2 idle cores; generous, since a loaded CI machine can be 10x slower
    seconds = time.perf_counter() - t0
    assert killed is not None, "no actor was seen computing a batch"
    assert "table" in result, f"labelling did not finish within {seconds:.0f} s after the kill"
    table = pa.concat_tables(ray.get(result["table"]))

    fields = answer_fields(parse_questions(QUESTIONS))
    assert table.schema == pa.schema([pa.field("id", pa.int64()), pa.field("text", pa.string()), *fields])
    ids = table.column("id").to_pylist()
    assert len(ids) == ROWS and sorted(ids) == list(range(ROWS))  # one row per input row
    for row in table.to_pylist():
        assert row["text"] == _rows()[row["id"]]["text"]
        _check_row(row, expected[row["text"]])
    record_property("seconds_with_kill", round(seconds, 1))
    print(f"\n{ROWS} rows, 2 actors, one killed (pid {killed}): {seconds:.1f} s")


def test_a_row_the_model_refuses_gets_td_error_and_its_batch_mates_answers(ray_cluster, tiny_model_dir,
                                                                           expected):
    """A null state and one over ``max_tokens`` fail alone (``td_error``, null answers); the other
    rows of their batch are answered as ``run_many`` answers them."""
    texts = sorted(expected)[:2]
    rows = [{"id": 0, "text": texts[0]}, {"id": 1, "text": None}, {"id": 2, "text": "word " * 400},
            {"id": 3, "text": texts[1]}]
    out = label_dataset(ray.data.from_items(rows), QUESTIONS, str(tiny_model_dir), batch_size=4,
                        max_tokens=256).take_all()
    by_id = {r["id"]: r for r in out}
    assert sorted(by_id) == [0, 1, 2, 3]
    _check_row(by_id[0], expected[texts[0]])
    _check_row(by_id[3], expected[texts[1]])
    assert by_id[1]["td_error"].startswith("InvalidRequestError: state")
    assert by_id[2]["td_error"].startswith("ContextTooLongError")
    for bad in (by_id[1], by_id[2]):
        assert bad["team"] is None and bad["urgent"] is None and bad["severity__p__0"] is None


def test_bad_input_is_refused_before_any_work(ray_cluster, tiny_model_dir):
    ds = ray.data.from_items([{"id": 1, "body": "x"}])
    with pytest.raises(InvalidRequestError, match="no column 'text'.*id, body"):
        label_dataset(ds, QUESTIONS, str(tiny_model_dir))
    with pytest.raises(InvalidRequestError) as e:
        label_dataset(ds, {"bad": {"type": "score", "criteria": ["one"]}}, str(tiny_model_dir), text_column="body")
    assert e.value.loc == ("questions", "bad", "criteria")
    with pytest.raises(InvalidRequestError, match="already has column"):
        label_dataset(ds, {"body": QUESTIONS["urgent"]}, str(tiny_model_dir), text_column="body")
