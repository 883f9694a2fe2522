"""``typed-decisions serve --ray`` and ``typed-decisions label``.

Fast tier: the runtime's CLI names the distribution to install when it is missing and imports
no Ray otherwise; ``label`` refuses a bad question file, a missing column, an unknown input type
and an output directory of another job before Ray starts. Model tier: ``label`` on a real local
cluster writes one part per shard, and a rerun after a lost part recomputes only that part.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from td_optional import require

require("ray", "bash scripts/setup.sh (installs integrations/ray[test])")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from typed_decisions.cli import main  # noqa: E402

QUESTIONS = {"urgent": {"type": "noul", "instructions": "Is it urgent?"},
             "team": {"type": "choice", "criteria": {"billing": "Payments", "tech": "Bugs"}}}


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("argv", [["serve", "--ray", "--model", "tiny"], ["label", "--help"]])
def test_ray_commands_name_the_missing_distribution(argv):
    out = _run("import sys; sys.modules['ray_typed_decisions'] = None\n"
               f"from typed_decisions.cli import main\nsys.exit(main({argv!r}))\n")
    assert out.returncode == 2, out.stderr
    assert "pip install typed-decisions-ray" in out.stderr


def test_runtime_cli_does_not_import_ray():
    out = _run("import sys\nfrom typed_decisions.cli import main\n"
               "from typed_decisions.server.main import serve_parser\n"
               "main(['--help']); serve_parser().parse_args(['--model', 'tiny'])\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'ray_typed_decisions')))\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS))
    pq.write_table(pa.table({"id": [1, 2], "text": ["I was charged twice.", "The app crashes."]}),
                   tmp_path / "in.parquet")
    return {"q": tmp_path / "q.json", "in": tmp_path / "in.parquet", "out": tmp_path / "out"}


def _label(files, *extra: str) -> list[str]:
    return ["label", "--model", "/no/such/export", "--questions", str(files["q"]), "--input", str(files["in"]),
            "--output", str(files["out"]), *extra]


@pytest.mark.parametrize("change, message", [
    ({"q": '{"bad": {"type": "score", "criteria": ["one"]}}'}, "questions.bad.criteria"),
    ({"q": "{not json"}, "is not valid JSON"),
    ({"text_column": "body"}, "no column 'body' (columns: id, text)"),
    ({"q": json.dumps({"text": QUESTIONS["urgent"]})}, "already has column(s) text"),
])
def test_label_refuses_bad_input_before_ray_starts(files, capsys, change, message):
    if "q" in change:
        files["q"].write_text(change["q"])
    extra = ["--text-column", change["text_column"]] if "text_column" in change else []
    assert main(_label(files, *extra)) == 2
    assert message in capsys.readouterr().err
    assert not files["out"].exists()  # nothing written, no cluster started


def test_label_refuses_an_unknown_input_type_and_another_jobs_output(files, capsys, tmp_path):
    files["in"] = tmp_path / "in.xlsx"
    files["in"].write_text("x")
    assert main(_label(files)) == 2
    assert "expected a .jsonl, .csv or .parquet file" in capsys.readouterr().err
    files["in"] = tmp_path / "in.parquet"
    files["out"].mkdir()
    (files["out"] / "_job.json").write_text(json.dumps({"model": "other"}))
    assert main(_label(files)) == 2
    assert "holds a job with other" in capsys.readouterr().err


@pytest.mark.model
def test_label_writes_parts_and_a_rerun_recomputes_only_a_lost_part(ray_cluster, tiny_model_dir, files,
                                                                   tiny_decider):
    texts = ["I was charged twice.", "The app crashes at login.", "Please upgrade my plan."]
    files["in"] = files["in"].with_suffix(".jsonl")
    files["in"].write_text("".join(json.dumps({"id": i, "text": texts[i % 3]}) + "\n" for i in range(12)))
    argv = [*_label(files, "--shard-rows", "5", "--concurrency", "1", "-q")]
    argv[2] = str(tiny_model_dir)
    assert main(argv) == 0
    parts = sorted(files["out"].glob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    before = {p.name: p.stat().st_mtime_ns for p in parts}
    parts[1].unlink()
    assert main(argv) == 0
    after = {p.name: p.stat().st_mtime_ns for p in sorted(files["out"].glob("part-*.parquet"))}
    assert after["part-00000.parquet"] == before["part-00000.parquet"]  # not recomputed
    assert after["part-00002.parquet"] == before["part-00002.parquet"]
    assert set(after) == set(before)
    table = pa.concat_tables(pq.read_table(p) for p in sorted(files["out"].glob("part-*.parquet")))
    assert table.column("id").to_pylist() == list(range(12))  # one row per input row, in order
    want = tiny_decider.run_many([{"model": tiny_decider.name, "state": t, "questions": QUESTIONS} for t in texts])
    for row in table.to_pylist():
        a = want[row["id"] % 3].answers
        assert row["urgent"] == pytest.approx(a["urgent"].noul, abs=1e-5)
        assert row["team"] == a["team"].choice
        assert row["team__p__tech"] == pytest.approx(a["team"].probabilities["tech"], abs=1e-5)


@pytest.mark.parametrize("flag", [["--debias", "rotate"], ["--wording", "terse"]])
def test_serve_ray_refuses_decider_flags_it_does_not_pass_on(flag, capsys):
    from ray_typed_decisions.cli import main_serve

    assert main_serve(["--model", "tiny", *flag]) == 2
    assert f"{flag[0]} {flag[1]} is not supported with --ray" in capsys.readouterr().err
