"""assent as the approver of an OpenAI Agents SDK run
(``pip install 'assent-client[openai-agents]'``).

A tool made with :meth:`AssentAgents.gate` needs approval (``needs_approval=True``), so the
SDK stops the run with an interruption at each call of it. :meth:`AssentAgents.run` proposes
each interrupted call to assent, waits for the human's decision there, and approves or
rejects the interruption in the ``RunState`` (a rejection's reason is what the model reads,
so it can re-plan); then it resumes the run. The gated tool carries a tool input guardrail
that redeems the approval's single-use token for the exact arguments the tool is about to
get, just before it runs: an approval runs one call, once, and a call nobody approved at
assent is refused.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult, RunState
from agents.items import ToolApprovalItem
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)

from .gate import AsyncApprover
from .wire import JSON


def _arguments(text: str | None) -> dict[str, JSON] | None:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class AssentAgents:
    """Makes assent the approver of Agents SDK runs, through ``approver``."""

    def __init__(self, approver: AsyncApprover) -> None:
        self.approver = approver
        self._gated: set[str] = set()

    def gate(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` that needs approval and redeems assent's token just before it
        runs (after the tool's own input guardrails). Give the agent this copy."""
        guard: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._redeem, name="assent-redeem"
        )
        self._gated.add(tool.name)
        return dataclasses.replace(
            tool,
            needs_approval=True,
            tool_input_guardrails=[*(tool.tool_input_guardrails or []), guard],
        )

    async def _redeem(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        args = _arguments(ctx.tool_arguments)
        if args is None:
            return ToolGuardrailFunctionOutput.reject_content(
                "the tool's arguments are not a JSON object"
            )
        refusal = await self.approver.redeem_for(ctx.tool_name, args)
        if refusal is None:
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content(refusal)

    async def resolve(self, state: RunState[Any, Any], item: ToolApprovalItem) -> bool:
        """Asks assent about one interruption and approves or rejects it in ``state``;
        answers whether it was approved."""
        name = item.name or ""
        args = _arguments(item.arguments)
        if args is None:
            state.reject(item, rejection_message="the tool's arguments are not a JSON object")
            return False
        v = await self.approver.decide(name, args)
        if not v.approved:
            state.reject(item, rejection_message=v.reason)
            return False
        if v.edited:
            # The SDK runs a pending call with the model's arguments; the approved call is
            # another one, kept for when the model makes it.
            state.reject(item, rejection_message=self.approver.keep(v))
            return False
        self.approver.allow(v)
        if name not in self._gated:
            # No guardrail on this tool: spend the token now, for the call as interrupted.
            refusal = await self.approver.redeem_for(name, args)
            if refusal is not None:
                state.reject(item, rejection_message=refusal)
                return False
        state.approve(item)
        return True

    async def run(
        self, agent: Agent[Any], input: str | list[Any], *, max_resumes: int = 100, **kwargs: Any
    ) -> RunResult:
        """``Runner.run`` with every interruption answered by assent, until the run finishes
        (``kwargs`` go to each ``Runner.run``). Raises ``RuntimeError`` after ``max_resumes``
        rounds of interruptions."""
        result = await Runner.run(agent, input, **kwargs)
        for _ in range(max_resumes):
            if not result.interruptions:
                return result
            state = result.to_state()
            for item in result.interruptions:
                await self.resolve(state, item)
            result = await Runner.run(agent, state, **kwargs)
        if result.interruptions:
            raise RuntimeError(f"the run was still interrupted after {max_resumes} resumes")
        return result
