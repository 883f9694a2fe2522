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


def _text(content: Any, limit: int = 160) -> str:
    """A question's content (text, or structured) as one short line for a tool description."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(runnable: Any) -> str:
    """What the agent reads to decide whether to call the tool: each question's own wording
    (its instructions), its options with their descriptions (or levels, lowest first), and what
    comes back.

    >>> from typed_decisions.schema import Choice, Noul, Score
    >>> class R:
    ...     questions = {"team": Choice(instructions="Which team should handle it?",
    ...                                 criteria={"billing": "payments, refunds", "tech": None}),
    ...                  "urgent": Noul(instructions="Is it urgent?"),
    ...                  "severity": Score(criteria=["low", "high"])}
    >>> print(_describe(R()))
    Answers typed questions about a text (pass the text as `state`), with probabilities:
    - team: "Which team should handle it?" One of: billing (payments, refunds); tech.
    - urgent: "Is it urgent?" Yes/no: the probability of yes.
    - severity: A score; levels, lowest first: 0 = low; 1 = high. Returns the expected level.
    """
    questions = getattr(runnable, "questions", None) or {getattr(runnable, "key", "answer"): runnable.question}
    lines = ["Answers typed questions about a text (pass the text as `state`), with probabilities:"]
    for name, q in questions.items():
        asked = f' "{_text(q.instructions)}"' if q.instructions is not None else ""
        if q.type == "choice":
            options = "; ".join(f"{o} ({_text(d, 80)})" if d is not None else o for o, d in q.criteria.items())
            lines.append(f"- {name}:{asked} One of: {options}.")
        elif q.type == "score":
            levels = "; ".join(f"{i} = {_text(level, 80)}" for i, level in enumerate(q.criteria))
            lines.append(f"- {name}:{asked} A score; levels, lowest first: {levels}. Returns the expected level.")
        else:
            meaning = ""
            if q.criteria is not None and q.criteria.true is not None:
                meaning = f" (yes means: {_text(q.criteria.true, 80)})"
            lines.append(f"- {name}:{asked} Yes/no{meaning}: the probability of yes.")
    return "\n".join(lines)


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
