"""docs/langchain.md runs: its python blocks are executed in order against the tiny real model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from langchain_typed_decisions import RoutedResult
from typed_decisions.schema import ChoiceAnswer

DOC = Path(__file__).resolve().parents[3] / "docs" / "langchain.md"
LOAD = 'Decider.from_dir("exports/smollm2-135m")'


def test_langchain_doc_examples_run(tiny_decider) -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4 and LOAD in blocks[0]
    ns: dict = {"__tiny_decider__": tiny_decider, "__name__": "docs_langchain"}
    for block in blocks:
        exec(compile(block.replace(LOAD, "__tiny_decider__"), str(DOC), "exec"), ns)
    assert isinstance(ns["result"], RoutedResult)
    assert ns["result"].route in {"billing", "technical", "fallback"}
    assert sum(ns["result"].decision.probabilities.values()) == pytest.approx(1.0)
    for r in ns["results"]:  # "legal" is manual: never routed automatically
        assert r.route == "fallback" if r.decision.choice == "legal" else r.route in {"billing", "technical", "fallback"}
    assert ns["final"]["handled_by"] in {"billing_desk", "tech_desk", "human_review"}
    assert isinstance(ns["message"].artifact, ChoiceAnswer)
