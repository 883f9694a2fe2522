"""``DecisionTool``: an agent asks the Runnable's typed questions about a text it chooses.

The tool's one argument is ``state`` (the text to judge). Its ``ToolMessage`` content is the
result as compact JSON — every answer with its probabilities (a single-question Runnable answers
with its full answer object) — and its artifact is the typed result itself
(``response_format="content_and_artifact"``), so the calling code keeps the pydantic objects.
Build it with ``runnable.as_tool()``.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field


class DecisionToolInput(BaseModel):
    """Arguments of a decision tool."""

    state: str = Field(description="The text (ticket, message, document) to answer the questions about.")


def _describe(runnable: Any) -> str:
    """A description listing the questions and their options, for the agent's tool prompt."""
    questions = getattr(runnable, "questions", None) or {getattr(runnable, "key", "answer"): runnable.question}
    parts = []
    for name, q in questions.items():
        if q.type == "choice":
            parts.append(f"{name} (one of: {', '.join(q.criteria)})")
        elif q.type == "score":
            parts.append(f"{name} (score 0-{len(q.criteria) - 1})")
        else:
            parts.append(f"{name} (yes/no probability)")
    return "Answers typed questions about a text, with probabilities: " + "; ".join(parts) + "."


def _as_text(result: Any) -> str:
    if isinstance(result, BaseModel):
        return result.model_dump_json(exclude_none=True)
    if isinstance(result, (dict, list)):
        return json.dumps(result, ensure_ascii=False)
    return str(result)


class DecisionTool(BaseTool):
    """Wraps a decision Runnable (``DecisionRunnable``, ``ChoiceRunnable``...) as a tool."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = "typed_decision"
    description: str = "Answers typed questions about a text."
    args_schema: type[BaseModel] = DecisionToolInput
    response_format: str = "content_and_artifact"
    runnable: Runnable[Any, Any]
    """The decision Runnable asked on each call."""

    @classmethod
    def from_runnable(cls, runnable: Runnable[Any, Any], *, name: str | None = None,
                      description: str | None = None) -> DecisionTool:
        # A single-question Runnable answers the agent with the full answer (probabilities too).
        runnable = runnable.with_answer() if hasattr(runnable, "with_answer") else runnable
        return cls(runnable=runnable, name=name or runnable.name or "typed_decision",
                   description=description or _describe(runnable))

    def _run(self, state: str, run_manager: CallbackManagerForToolRun | None = None
             ) -> tuple[str, Any]:
        config = {"callbacks": run_manager.get_child()} if run_manager else None
        result = self.runnable.invoke(state, config)
        return _as_text(result), result

    async def _arun(self, state: str, run_manager: AsyncCallbackManagerForToolRun | None = None
                    ) -> tuple[str, Any]:
        config = {"callbacks": run_manager.get_child()} if run_manager else None
        result = await self.runnable.ainvoke(state, config)
        return _as_text(result), result


__all__ = ["DecisionTool", "DecisionToolInput"]
