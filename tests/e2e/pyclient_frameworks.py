"""The agent runs of test_python_client.py: the real OpenAI Agents SDK and the real LangChain
`create_agent` graph with human-in-the-loop middleware, each with a scripted model (no
network) and tools that record what really ran. Both scripts are the same: the model asks to
pay (`transfer_funds`); when that is approved it answers "Paid."; when it reads a rejection it
re-plans with `get_balance` and then answers "Checked the balance instead.". In the "approve"
script the first turn also reads a balance (allowed by policy, no person), so one turn holds two
gated calls."""

import asyncio
from dataclasses import dataclass, field
from typing import Any

PAYMENT = {"amount": 5000, "currency": "EUR", "recipient": "ext-acme"}
EDITED = {**PAYMENT, "amount": 900}  # what the operator approves instead (`assent approve --args`)


@dataclass
class Outcome:
    ran: list = field(default_factory=list)  # (tool, arguments) of every tool body that ran
    final: str = ""
    rejection_seen: str = ""  # what the model read after the first tool call


# --- OpenAI Agents SDK ----------------------------------------------------------------------


def agents_run(aclient, session_id, steps):
    """`steps`: "approve", "deny" (the model re-plans), "edit" (the operator approved other
    arguments: the model reads them and makes that call) or "bypass" (the interruption is
    approved in the RunState directly, not by assent)."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from assent_client import AsyncApprover
    from assent_client.openai_agents import AssentAgents

    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    out = Outcome()

    @function_tool
    def transfer_funds(amount: int, currency: str, recipient: str) -> str:
        """Moves money out of the treasury account."""
        out.ran.append(("transfer_funds", {"amount": amount, "currency": currency, "recipient": recipient}))
        return "transferred"

    @function_tool
    def get_balance(account: str) -> str:
        """Reads an account's balance."""
        out.ran.append(("get_balance", {"account": account}))
        return "12000 EUR"

    def replan(call):
        # What the model reads: the outputs given back for its tool calls.
        out.rejection_seen = "\n".join(str(i.get("output")) for i in call.input
                                       if isinstance(i, dict) and i.get("type") == "function_call_output")
        if steps == "bypass":
            return [assistant_message("Gave up.")]
        if steps == "edit":
            return [function_call("transfer_funds", EDITED, call_id="c3")]
        return [function_call("get_balance", {"account": "eur"}, call_id="c2")]

    script = [[function_call("transfer_funds", PAYMENT, call_id="c1")]]
    if steps == "approve":
        script[0].append(function_call("get_balance", {"account": "main"}, call_id="c0"))
        script.append([assistant_message("Paid.")])
    elif steps == "edit":
        script += [ModelStep.respond(replan), [assistant_message("Paid.")]]
    else:
        script += [ModelStep.respond(replan), [assistant_message("Checked the balance instead.")]]
    model = ScriptedModel(script)
    adapter = AssentAgents(AsyncApprover(aclient, session_id=session_id))
    agent = Agent(name="helper", instructions="Pay invoices.", model=model,
                  tools=[adapter.gate(transfer_funds), adapter.gate(get_balance)])

    async def go():
        try:
            if steps == "bypass":
                result = await Runner.run(agent, "Pay invoice 4711.")
                state = result.to_state()
                for item in result.interruptions:
                    state.approve(item)  # not assent's approval: no token for the call
                return await Runner.run(agent, state)
            return await adapter.run(agent, "Pay invoice 4711.")
        finally:
            await aclient.aclose()

    out.final = str(asyncio.run(go()).final_output)
    return out


# --- LangChain / LangGraph ------------------------------------------------------------------


def _scripted_chat():
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChat(BaseChatModel):
        """A chat model that answers from a script: an AIMessage, or a function of the
        messages it was sent. `bind_tools` keeps the script (the tools are the agent's)."""

        script: list[Any]

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            step = self.script.pop(0)
            msg = step(messages) if callable(step) else step
            return ChatResult(generations=[ChatGeneration(message=msg)])

    return ScriptedChat


def langchain_run(approver, mode, steps, use_async=False):
    """`steps`: "approve", "deny" (the model re-plans) or "bypass" (the interrupt is answered
    with an approval by someone else than assent); `mode`: the HITL interrupt mode."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from assent_client.langchain_hitl import AssentHITL

    out = Outcome()

    @tool
    def transfer_funds(amount: int, currency: str, recipient: str) -> str:
        """Moves money out of the treasury account."""
        out.ran.append(("transfer_funds", {"amount": amount, "currency": currency, "recipient": recipient}))
        return "transferred"

    @tool
    def get_balance(account: str) -> str:
        """Reads an account's balance."""
        out.ran.append(("get_balance", {"account": account}))
        return "12000 EUR"

    def call(name, args, id, *more):
        calls = [(name, args, id), *more]
        return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"}
                                                 for n, a, i in calls])

    def replan(messages):
        out.rejection_seen = "\n".join(str(m.content) for m in messages if isinstance(m, ToolMessage))
        return call("get_balance", {"account": "eur"}, "c2")

    script = [call("transfer_funds", PAYMENT, "c1")]
    if steps == "approve":
        script[0] = call("transfer_funds", PAYMENT, "c1", ("get_balance", {"account": "main"}, "c0"))
        script.append(AIMessage(content="Paid."))
    elif steps == "bypass":
        def give_up(messages):
            replan(messages)
            return AIMessage(content="Gave up.")

        script.append(give_up)
    else:
        script += [replan, AIMessage(content="Checked the balance instead.")]
    hitl = AssentHITL(approver, ["transfer_funds", "get_balance"], interrupt_mode=mode)
    graph = create_agent(_scripted_chat()(script=script), tools=[transfer_funds, get_balance],
                         middleware=hitl.middleware, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": approver.session_id}}
    start = {"messages": [{"role": "user", "content": "Pay invoice 4711."}]}
    try:
        if steps == "bypass":
            first = graph.invoke(start, config, version="v2")
            approve = {"decisions": [{"type": "approve"}]} if mode == "batched" else {"type": "approve"}
            result = graph.invoke(Command(resume={i.id: approve for i in first.interrupts}), config,
                                  version="v2")
        elif use_async:
            result = asyncio.run(hitl.ainvoke(graph, start, config))
        else:
            result = hitl.invoke(graph, start, config)
    finally:
        approver.client.close()
    out.final = str(result.value["messages"][-1].content)
    return out
