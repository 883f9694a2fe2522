"""docs/dspy.md runs: its python blocks are executed in order against the tiny real model."""

import re
from pathlib import Path

import dspy
import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "dspy.md"
LOAD = 'TypedDecisionsLM("exports/smollm2-135m")'


def test_dspy_doc_examples_run(tiny_decider) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 4 and LOAD in blocks[0]
    ns: dict = {"__tiny_decider__": tiny_decider, "__name__": "docs_dspy"}
    try:
        for block in blocks:
            code = block.replace(LOAD, "TypedDecisionsLM(__tiny_decider__)")
            exec(compile(code, str(DOC), "exec"), ns)
    finally:
        dspy.configure(lm=None)
    assert ns["pred"].team in {"billing", "technical"} and isinstance(ns["pred"].urgent, bool)
    assert sum(ns["pred"].severity.probabilities.values()) == pytest.approx(1.0, abs=1e-6)
    assert 0.0 <= ns["report"].score <= 100.0
    assert ns["reanchor"].report["train_score"] >= ns["reanchor"].report["train_score_before"]
    assert isinstance(ns["severity"], ns["Severity"])
