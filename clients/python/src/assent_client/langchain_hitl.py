"""assent as the reviewer of LangChain's human-in-the-loop middleware
(``pip install 'assent-client[langchain]'``).

``langchain.agents.middleware.HumanInTheLoopMiddleware`` pauses a ``create_agent`` graph with
a LangGraph ``interrupt`` before the tools in its ``interrupt_on`` run. :class:`AssentHITL`
answers those interrupts with assent's decision (``Command(resume=...)``): ``approve``;
``edit`` when an operator approved other arguments; ``reject`` with assent's reason as the
message, so the model reads it and re-plans. Its :attr:`AssentHITL.middleware` puts the HITL
middleware and a redeeming middleware on the agent: just before a gated tool runs, the latter
redeems the approval's single-use token for the exact call about to run (after an edit, the
edited one), and a call nobody approved at assent gets an error message instead of running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain.agents.middleware.human_in_the_loop import Decision, InterruptOnConfig
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command, GraphOutput, Interrupt

from .gate import Approver, Verdict
from .wire import JSON

DECISIONS: list[Literal["approve", "edit", "reject", "respond"]] = ["approve", "edit", "reject"]
"""The decisions assent's answers need a gated tool to allow."""


class AssentRedeemMiddleware(AgentMiddleware[Any, Any, Any]):
    """Redeems assent's token for a gated tool's exact call just before it runs; list it
    after ``HumanInTheLoopMiddleware`` so that it sees a reviewer's edit."""

    def __init__(self, approver: Approver, tools: Iterable[str]) -> None:
        super().__init__()
        self.approver = approver
        self.gated = frozenset(tools)  # not `tools`: that is the middleware's own tool list

    def _refused(self, request: ToolCallRequest, refusal: str) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(
            content=refusal, name=call["name"], tool_call_id=call["id"] or "", status="error"
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Redeems, then runs the tool; or answers the refusal without running it."""
        call = request.tool_call
        if call["name"] in self.gated:
            if (refusal := self.approver.redeem_for(call["name"], call["args"])) is not None:
                return self._refused(request, refusal)
        return handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """The same, for ``ainvoke`` (the synchronous client runs in a worker thread)."""
        call = request.tool_call
        if call["name"] in self.gated:
            refusal = await asyncio.to_thread(self.approver.redeem_for, call["name"], call["args"])
            if refusal is not None:
                return self._refused(request, refusal)
        return await handler(request)


class AssentHITL:
    """Answers ``HumanInTheLoopMiddleware`` interrupts for ``tools`` with assent's decisions.

    ``interrupt_mode`` is the HITL middleware's (``"batched"`` or ``"per_call"``). When you
    build the HITL middleware yourself instead of using :attr:`middleware`, its gated tools
    must allow the ``approve``, ``edit`` and ``reject`` decisions and be listed in ``tools``,
    and :class:`AssentRedeemMiddleware` must come after it.
    """

    def __init__(
        self,
        approver: Approver,
        tools: Iterable[str],
        *,
        interrupt_mode: Literal["batched", "per_call"] = "batched",
    ) -> None:
        self.approver = approver
        self.tools = frozenset(tools)
        self.interrupt_mode = interrupt_mode

    @property
    def middleware(self) -> list[AgentMiddleware[Any, Any, Any]]:
        """The HITL middleware for :attr:`tools`, then the redeeming one: give both to
        ``create_agent(..., middleware=...)`` (with a checkpointer)."""
        config: dict[str, bool | InterruptOnConfig] = {
            t: InterruptOnConfig(allowed_decisions=list(DECISIONS)) for t in self.tools
        }
        hitl: HumanInTheLoopMiddleware[Any, Any, Any] = HumanInTheLoopMiddleware(
            interrupt_on=config, interrupt_mode=self.interrupt_mode
        )
        return [hitl, AssentRedeemMiddleware(self.approver, self.tools)]

    def decide(
        self, name: str, args: dict[str, JSON], allowed: Sequence[str] = DECISIONS
    ) -> Decision:
        """assent's decision on one call, as the HITL middleware reads it."""
        if "reject" not in allowed:
            raise ValueError(f"`{name}` must allow the reject decision to be gated by assent")
        v: Verdict = self.approver.decide(name, args)
        if not v.approved:
            return {"type": "reject", "message": v.reason}
        if not v.edited:
            self.approver.allow(v)
            return {"type": "approve"}
        if "edit" not in allowed:
            return {"type": "reject", "message": self.approver.keep(v)}
        self.approver.allow(v)
        return {"type": "edit", "edited_action": {"name": name, "args": v.arguments}}

    def answer(self, interrupt: Interrupt[Any]) -> Any:
        """The resume value for one HITL interrupt (a ``HITLRequest`` or, per call, a
        ``ToolApprovalRequest``); ``ValueError`` for any other interrupt."""
        value = interrupt.value
        if isinstance(value, dict) and value.get("type") == "tool_approval":
            return self.decide(value["name"], value["args"])
        if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
            allowed = {
                c["action_name"]: c["allowed_decisions"] for c in value.get("review_configs", [])
            }
            decisions = [
                self.decide(r["name"], r["args"], allowed.get(r["name"], DECISIONS))
                for r in value["action_requests"]
            ]
            return {"decisions": decisions}
        raise ValueError(f"interrupt {interrupt.id} is not a human-in-the-loop approval request")

    def resume(self, interrupts: Sequence[Interrupt[Any]]) -> Command[Any]:
        """``Command(resume=...)`` answering every interrupt, by interrupt id."""
        return Command(resume={i.id: self.answer(i) for i in interrupts})

    def invoke(
        self, graph: Any, input: Any, config: Any, *, max_resumes: int = 100, **kwargs: Any
    ) -> GraphOutput[Any]:
        """``graph.invoke(..., version="v2")``, answering every interrupt with assent's
        decisions and resuming, until the graph finishes; ``RuntimeError`` after
        ``max_resumes`` rounds of interrupts."""
        out: GraphOutput[Any] = graph.invoke(input, config, version="v2", **kwargs)
        for _ in range(max_resumes):
            if not out.interrupts:
                return out
            out = graph.invoke(self.resume(out.interrupts), config, version="v2", **kwargs)
        if out.interrupts:
            raise RuntimeError(f"the graph was still interrupted after {max_resumes} resumes")
        return out

    async def ainvoke(
        self, graph: Any, input: Any, config: Any, *, max_resumes: int = 100, **kwargs: Any
    ) -> GraphOutput[Any]:
        """:meth:`invoke` with ``graph.ainvoke``; assent is asked in a worker thread (the
        approver's client is synchronous), so the event loop keeps running while a person
        decides."""
        out: GraphOutput[Any] = await graph.ainvoke(input, config, version="v2", **kwargs)
        for _ in range(max_resumes):
            if not out.interrupts:
                return out
            command = await asyncio.to_thread(self.resume, out.interrupts)
            out = await graph.ainvoke(command, config, version="v2", **kwargs)
        if out.interrupts:
            raise RuntimeError(f"the graph was still interrupted after {max_resumes} resumes")
        return out
