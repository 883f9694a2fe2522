"""``as_tool()`` under LangChain's standard tool tests (subclassed, not rewritten)."""

from __future__ import annotations

import pytest
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests
from langchain_typed_decisions import ChoiceRunnable, DecisionRunnable, DecisionTool
from td_fakes import FakeDecider

QUESTIONS = {"team": {"type": "choice", "criteria": {"billing": None, "tech": None}},
             "urgent": {"type": "noul", "instructions": "Is it urgent?"}}
TOOL = DecisionRunnable(decider=FakeDecider(), questions=QUESTIONS, name="ticket_triage").as_tool()


class _TriageTool:
    """What langchain-tests' standard suites need to know about our tool (shared by both)."""

    @property
    def tool_constructor(self) -> BaseTool:
        return TOOL

    @property
    def tool_invoke_params_example(self) -> dict:
        return {"state": "The app crashes on login"}


class TestDecisionToolUnit(_TriageTool, ToolsUnitTests):
    pass


@pytest.mark.filterwarnings("ignore:.*is marked with '@pytest.mark.asyncio':pytest.PytestWarning")
@pytest.mark.asyncio
class TestDecisionToolIntegration(_TriageTool, ToolsIntegrationTests):
    pass


def test_tool_message_carries_json_and_typed_artifact(fake_decider) -> None:
    tool = ChoiceRunnable(decider=fake_decider, question=QUESTIONS["team"]).as_tool(name="team")
    assert isinstance(tool, DecisionTool) and tool.name == "team"
    assert "One of: billing; tech." in tool.description
    msg = tool.invoke({"type": "tool_call", "id": "1", "name": "team", "args": {"state": "tech down"}})
    assert '"choice":"tech"' in msg.content
    assert msg.artifact.choice == "tech"
    with pytest.raises(ValueError, match="input is fixed"):
        ChoiceRunnable(decider=fake_decider, question=QUESTIONS["team"]).as_tool(arg_types={"x": int})


def test_tool_description_carries_each_questions_wording_and_options(fake_decider) -> None:
    """An agent chooses a tool by its description: it must see the questions themselves."""
    questions = {"team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                          "criteria": {"billing": "payments and refunds", "tech": None}},
                 "urgent": {"type": "noul", "instructions": "Does the customer need an answer today?"},
                 "severity": {"type": "score", "instructions": "How severe is it?",
                              "criteria": ["cosmetic", "degraded", "down"]}}
    text = DecisionRunnable(decider=fake_decider, questions=questions).as_tool().description
    for name, q in questions.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"- {name}:"))
        assert q["instructions"] in line
    assert "billing (payments and refunds); tech" in text
    assert "0 = cosmetic; 1 = degraded; 2 = down" in text
