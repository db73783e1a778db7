"""What the framework adapters share: asking assent about one tool call and remembering, for
the call that will really run, the single-use token to redeem just before it does.

:class:`Approver` (sync) and :class:`AsyncApprover` propose a call, wait for a human where
assent holds it, and answer a :class:`Verdict`. An approved verdict is *registered* for the
exact call (tool, server, canonical arguments); the adapter's pre-run hook then calls
``redeem_for`` with the arguments the tool is about to get, which spends the token at the
gateway (so an approval runs one call, once, with the approved arguments) or refuses.
Anything not registered is refused: fail closed."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .client import AssentClient, AsyncAssentClient
from .wire import JSON, Allowed, Approval, AssentError, Denied, Pending


@dataclass(frozen=True)
class Verdict:
    """assent's answer for one call, as an adapter acts on it.

    ``approved``: the call may run with ``arguments`` (the operator's edit when ``edited``),
    after ``token`` (when not ``None``) is redeemed. Otherwise ``reason`` is what the model is
    told. ``approval_id`` names the approval, when there was one.
    """

    approved: bool
    tool: str
    server: str | None
    arguments: dict[str, JSON]
    reason: str = ""
    approval_id: str | None = None
    token: str | None = field(default=None, repr=False)
    edited: bool = False


Key = tuple[str, str | None, str]


def call_key(tool: str, server: str | None, arguments: JSON) -> Key:
    """The key a call's pass is stored under: tool, server and the sorted compact JSON of its
    arguments (the gateway binds the token to the RFC 8785 hash of the same call)."""
    return (tool, server, json.dumps(arguments, sort_keys=True, separators=(",", ":")))


def from_answer(
    tool: str, server: str | None, args: dict[str, JSON], a: Allowed | Denied
) -> Verdict:
    """The verdict an allow or a deny settles (a pending call waits for its approval)."""
    if isinstance(a, Allowed):
        return Verdict(True, tool, server, args, approval_id=a.approval_id, token=a.token)
    return Verdict(False, tool, server, args, reason=f"assent denied the call: {a.reason}")


def from_approval(tool: str, server: str | None, args: dict[str, JSON], a: Approval) -> Verdict:
    """The verdict a settled (or timed-out) approval gives."""
    if a.token is not None:
        edited = a.arguments_changed
        return Verdict(
            True,
            tool,
            server,
            a.effective_arguments,
            approval_id=a.id,
            token=a.token,
            edited=edited,
        )
    if a.status == "pending":
        # Still pending: the withdrawal after the wait did not go through (found by review:
        # this said it was withdrawn, while an operator could still approve it).
        why = (
            "nobody decided in time, and the request could not be withdrawn: it may still be "
            "approved, but this call does not run"
        )
    elif a.status == "approved":
        why = "approved, but the gateway gave no token for it"
    else:
        why = a.reason or a.status
    return Verdict(False, tool, server, args, reason=f"assent {a.status}: {why}", approval_id=a.id)


def _lost_wait(
    tool: str,
    server: str | None,
    args: dict[str, JSON],
    approval_id: str,
    e: AssentError | ValueError,
    withdrawn: bool,
) -> Verdict:
    """The verdict when the wait for a held call's decision failed (the gateway unreachable, an
    answer this client cannot read): the call does not run; the request was withdrawn, or, when
    that failed too, may still be decided (found by review: this was told as a refusal while an
    operator could still approve it)."""
    what = e.message if isinstance(e, AssentError) else str(e)
    left = (
        "the request was withdrawn"
        if withdrawn
        else "the request could not be withdrawn: it may still be approved, but this call does not run"
    )
    return Verdict(
        False,
        tool,
        server,
        args,
        reason=f"assent: the wait for a decision failed ({what}); {left}",
        approval_id=approval_id,
    )


class _Passes:
    """Approved calls waiting to run, and edited approvals kept for a later identical call.
    A lock guards them: LangGraph runs a turn's tool calls in parallel threads."""

    def __init__(self) -> None:
        self.ready: dict[Key, list[Verdict]] = {}
        self.kept: dict[Key, list[Verdict]] = {}
        self._lock = threading.Lock()

    def push(self, d: dict[Key, list[Verdict]], v: Verdict) -> None:
        with self._lock:
            d.setdefault(call_key(v.tool, v.server, v.arguments), []).append(v)

    def pop(self, d: dict[Key, list[Verdict]], key: Key) -> Verdict | None:
        with self._lock:
            vs = d.get(key)
            if not vs:
                return None
            v = vs.pop(0)
            if not vs:
                del d[key]
            return v


def _edit_message(v: Verdict) -> str:
    return (
        "assent approved this call only with other arguments, chosen by an operator: "
        f"{json.dumps(v.arguments, sort_keys=True)}. Call the tool again with exactly these "
        "arguments to run the approved call."
    )


class _Base:
    def __init__(
        self, session_id: str, servers: Mapping[str, str] | None, timeout: float | None
    ) -> None:
        self.session_id = session_id
        self.servers = dict(servers or {})
        self.timeout = timeout
        self._passes = _Passes()

    def server_of(self, tool: str) -> str | None:
        """The MCP server alias assent knows ``tool`` under (``None``: a local tool)."""
        return self.servers.get(tool)

    def _kept(self, tool: str, args: dict[str, JSON]) -> Verdict | None:
        return self._passes.pop(self._passes.kept, call_key(tool, self.server_of(tool), args))

    def allow(self, v: Verdict) -> None:
        """Registers an approved verdict for the call that will run (its ``arguments``)."""
        if not v.approved:
            raise ValueError("only an approved verdict may be registered to run")
        self._passes.push(self._passes.ready, v)

    def keep(self, v: Verdict) -> str:
        """Keeps an approval edited by an operator for a later call with exactly its arguments
        (for frameworks that cannot change a pending call's arguments); answers the message
        that tells the model so."""
        self._passes.push(self._passes.kept, v)
        return _edit_message(v)

    def _take(self, tool: str, args: JSON) -> Verdict | None:
        return self._passes.pop(self._passes.ready, call_key(tool, self.server_of(tool), args))


def _refusal(tool: str, e: AssentError | ValueError) -> str:
    if isinstance(e, AssentError):
        return f"assent refused to run `{tool}`: {e.code} {e.message}".rstrip()
    return f"assent refused to run `{tool}`: its arguments cannot be sent ({e})"


def _not_asked(
    tool: str, server: str | None, args: dict[str, JSON], e: AssentError | ValueError
) -> Verdict:
    """The verdict when assent could not be asked or refused the request itself (a 4xx such as
    an inexact number or too many pending calls, the gateway unreachable, arguments JSON cannot
    carry): the call does not run, and the model is told why, so it can re-plan. Found by
    review: the error ended the whole agent run instead."""
    return Verdict(False, tool, server, args, reason=_refusal(tool, e))


NOT_APPROVED = "assent has no approval for this exact call; it was not run"
"""What the model is told when a gated tool is about to run without a registered approval."""


class Approver(_Base):
    """Asks assent about calls through a synchronous :class:`AssentClient`.

    ``session_id`` is the agent session the calls belong to; ``servers`` maps a tool name to
    its MCP server alias where assent knows it under one; ``timeout`` bounds the wait for a
    human (seconds, ``None``: until the approval expires), after which the approval is
    cancelled and the call refused.
    """

    def __init__(
        self,
        client: AssentClient,
        *,
        session_id: str,
        servers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(session_id, servers, timeout)
        self.client = client

    def decide(self, tool: str, arguments: dict[str, JSON]) -> Verdict:
        """Proposes the call and, when held, waits for the human's decision."""
        if (v := self._kept(tool, arguments)) is not None:
            return replace(v, edited=False)
        server = self.server_of(tool)
        try:
            answer = self.client.propose(
                tool, arguments, session_id=self.session_id, server=server
            )
        except (AssentError, ValueError) as e:
            return _not_asked(tool, server, arguments, e)
        if not isinstance(answer, Pending):
            return from_answer(tool, server, arguments, answer)
        try:
            a = self.client.wait(answer.approval_id, timeout=self.timeout)
            if a.status == "pending":
                a = self._withdraw(a)
        except (AssentError, ValueError) as e:
            try:
                self.client.cancel(answer.approval_id, reason="the agent stopped waiting")
                withdrawn = True
            except (AssentError, ValueError):
                withdrawn = False
            return _lost_wait(tool, server, arguments, answer.approval_id, e, withdrawn)
        return from_approval(tool, server, arguments, a)

    def _withdraw(self, a: Approval) -> Approval:
        try:
            return self.client.cancel(a.id, reason="the agent stopped waiting")
        except AssentError as e:
            if e.code != "ALREADY_DECIDED":
                return a
            return self.client.approval(a.id)

    def redeem_for(self, tool: str, arguments: JSON) -> str | None:
        """Just before ``tool`` runs with ``arguments``: redeems its approval's token for exactly
        those arguments (the gateway checks their hash against the approved call).
        ``None`` when it may run; otherwise the refusal to give the model instead."""
        v = self._take(tool, arguments)
        if v is None:
            return NOT_APPROVED
        if v.token is None:
            return None
        try:
            self.client.redeem(v.token, tool, arguments, server=v.server)
        except (AssentError, ValueError) as e:
            return _refusal(tool, e)
        return None


class AsyncApprover(_Base):
    """:class:`Approver` over an :class:`AsyncAssentClient`; same arguments, awaited."""

    def __init__(
        self,
        client: AsyncAssentClient,
        *,
        session_id: str,
        servers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(session_id, servers, timeout)
        self.client = client

    async def decide(self, tool: str, arguments: dict[str, JSON]) -> Verdict:
        """See :meth:`Approver.decide`."""
        if (v := self._kept(tool, arguments)) is not None:
            return replace(v, edited=False)
        server = self.server_of(tool)
        try:
            answer = await self.client.propose(
                tool, arguments, session_id=self.session_id, server=server
            )
        except (AssentError, ValueError) as e:
            return _not_asked(tool, server, arguments, e)
        if not isinstance(answer, Pending):
            return from_answer(tool, server, arguments, answer)
        try:
            a = await self.client.wait(answer.approval_id, timeout=self.timeout)
            if a.status == "pending":
                a = await self._withdraw(a)
        except (AssentError, ValueError) as e:
            try:
                await self.client.cancel(answer.approval_id, reason="the agent stopped waiting")
                withdrawn = True
            except (AssentError, ValueError):
                withdrawn = False
            return _lost_wait(tool, server, arguments, answer.approval_id, e, withdrawn)
        return from_approval(tool, server, arguments, a)

    async def _withdraw(self, a: Approval) -> Approval:
        try:
            return await self.client.cancel(a.id, reason="the agent stopped waiting")
        except AssentError as e:
            if e.code != "ALREADY_DECIDED":
                return a
            return await self.client.approval(a.id)

    async def redeem_for(self, tool: str, arguments: JSON) -> str | None:
        """See :meth:`Approver.redeem_for`."""
        v = self._take(tool, arguments)
        if v is None:
            return NOT_APPROVED
        if v.token is None:
            return None
        try:
            await self.client.redeem(v.token, tool, arguments, server=v.server)
        except (AssentError, ValueError) as e:
            return _refusal(tool, e)
        return None
