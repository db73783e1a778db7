"""The gateway's answers as typed, read-only values, and the errors it (or a broken answer)
raises. Parsing is strict where safety depends on it: an ``allow`` that carries a grant's
token but no ``approval_id`` is refused (a token must never be skipped), and a malformed
answer is an :class:`AssentError` with code ``BAD_RESPONSE``, never a silent allow."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

JSON = Any
"""A decoded JSON value."""


class AssentError(Exception):
    """A non-2xx answer from the gateway, or an answer this client cannot read.

    ``code`` is the gateway's stable error code (``TOKEN_USED``, ``TOKEN_MISMATCH``,
    ``FORBIDDEN``, ``TOO_MANY_PENDING``…), ``HTTP_<status>`` when the body carried none, or
    ``BAD_RESPONSE`` when a 2xx answer did not have the documented shape. ``status`` is the HTTP
    status (0 for a transport failure); ``body`` the decoded JSON body, if any.
    """

    def __init__(self, code: str, message: str, status: int = 0, body: JSON = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.body = body


def bad(what: str) -> AssentError:
    """The error for a 2xx answer that does not have the documented shape."""
    return AssentError("BAD_RESPONSE", what)


def _obj(v: JSON, what: str) -> dict[str, JSON]:
    if not isinstance(v, dict):
        raise bad(f"{what} is not a JSON object")
    return v


def _str(d: dict[str, JSON], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise bad(f"`{key}` is missing or not a string")
    return v


def _opt_str(d: dict[str, JSON], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise bad(f"`{key}` is not a string")
    return v


def _strs(d: dict[str, JSON], key: str) -> tuple[str, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad(f"`{key}` is not a list of strings")
    return tuple(v)


@dataclass(frozen=True)
class Reason:
    """One rule behind a verdict: the file, the rule in it, and what it said."""

    file: str
    rule: str
    text: str


def _reasons(d: dict[str, JSON]) -> tuple[Reason, ...]:
    v = d.get("reasons", [])
    if not isinstance(v, list):
        raise bad("`reasons` is not a list")
    out = []
    for r in v:
        r = _obj(r, "a reason")
        out.append(Reason(file=_str(r, "file"), rule=_str(r, "rule"), text=_str(r, "text")))
    return tuple(out)


@dataclass(frozen=True)
class Allowed:
    """``200 allow``: the call may run. When ``token`` is set (a grant covered the call), it
    must be redeemed for exactly this call before the call runs."""

    call_hash: str
    risk_tier: str
    reasons: tuple[Reason, ...]
    triggers: tuple[str, ...]
    approval_id: str | None = None
    grant_id: str | None = None
    scope: str | None = None
    token: str | None = field(default=None, repr=False)
    token_expires_at: str | None = None
    raw: dict[str, JSON] = field(default_factory=dict, repr=False, compare=False)
    decision: Literal["allow"] = "allow"


@dataclass(frozen=True)
class Denied:
    """``403 TOOL_DENIED``: the policy refuses the call; ``reason`` says why."""

    call_hash: str
    risk_tier: str
    reason: str
    reasons: tuple[Reason, ...]
    triggers: tuple[str, ...]
    raw: dict[str, JSON] = field(default_factory=dict, repr=False, compare=False)
    decision: Literal["deny"] = "deny"


@dataclass(frozen=True)
class Pending:
    """``202 pending``: the call is held for a human as approval ``approval_id``."""

    approval_id: str
    call_hash: str
    risk_tier: str
    message: str
    expires_at: str
    joined: bool
    reasons: tuple[Reason, ...]
    triggers: tuple[str, ...]
    raw: dict[str, JSON] = field(default_factory=dict, repr=False, compare=False)
    decision: Literal["pending"] = "pending"


GateAnswer = Allowed | Denied | Pending
"""The gate's answer to a proposed call."""

_GRANT_FIELDS = ("grant_id", "scope", "token", "approval_token", "token_expires_at")


def parse_gate_answer(body: JSON) -> GateAnswer:
    """Reads the answer to ``POST /v1/tool-calls`` (200, 202 or 403 TOOL_DENIED)."""
    d = _obj(body, "the gate answer")
    kind = d.get("decision")
    call_hash, risk_tier = _str(d, "call_hash"), _str(d, "risk_tier")
    reasons, triggers = _reasons(d), _strs(d, "triggers")
    if kind == "allow":
        approval_id = _opt_str(d, "approval_id")
        if approval_id is None and any(d.get(k) is not None for k in _GRANT_FIELDS):
            raise bad("an allow with a grant's fields but no `approval_id`")
        token = _opt_str(d, "token")
        if approval_id is not None and token is None:
            raise bad("a granted allow without its `token`")
        return Allowed(
            approval_id=approval_id,
            grant_id=_opt_str(d, "grant_id"),
            scope=_opt_str(d, "scope"),
            token=token,
            token_expires_at=_opt_str(d, "token_expires_at"),
            call_hash=call_hash,
            risk_tier=risk_tier,
            reasons=reasons,
            triggers=triggers,
            raw=d,
        )
    if kind == "deny":
        return Denied(
            call_hash=call_hash,
            risk_tier=risk_tier,
            reason=_str(d, "reason"),
            reasons=reasons,
            triggers=triggers,
            raw=d,
        )
    if kind == "pending":
        joined = d.get("joined", False)
        return Pending(
            approval_id=_str(d, "approval_id"),
            message=_str(d, "message"),
            expires_at=_str(d, "expires_at"),
            joined=joined is True,
            call_hash=call_hash,
            risk_tier=risk_tier,
            reasons=reasons,
            triggers=triggers,
            raw=d,
        )
    raise bad(f"unknown decision {kind!r}")


@dataclass(frozen=True)
class Call:
    """A tool call as the gateway shows it: ``server`` is ``None`` for a local tool."""

    tool: str
    server: str | None
    arguments: dict[str, JSON]


ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "cancelled"]
_STATUSES = ("pending", "approved", "rejected", "expired", "cancelled")


@dataclass(frozen=True)
class Approval:
    """An approval record (``GET /v1/approvals/{id}``).

    ``token`` is present (for the agent that asked) once the call may run; redeem it for
    :attr:`effective_arguments`. ``code``/``reason`` say why the call will not run.
    """

    id: str
    status: ApprovalStatus
    agent: str
    session_id: str
    call: Call
    call_hash: str
    message: str
    risk_tier: str
    expires_at: str
    arguments_changed: bool
    arguments: dict[str, JSON] | None
    scope: str | None
    code: str | None
    reason: str | None
    token: str | None = field(repr=False)
    token_expires_at: str | None
    raw: dict[str, JSON] = field(default_factory=dict, repr=False, compare=False)

    @property
    def effective_arguments(self) -> dict[str, JSON]:
        """The arguments the call may run with: the operator's edit, else the proposed ones."""
        if self.arguments_changed and self.arguments is not None:
            return self.arguments
        return self.call.arguments


def parse_approval(body: JSON) -> Approval:
    """Reads an approval record."""
    d = _obj(body, "the approval")
    status = d.get("status")
    if status not in _STATUSES:
        raise bad(f"unknown approval status {status!r}")
    c = _obj(d.get("call"), "`call`")
    args = _obj(c.get("arguments"), "`call.arguments`")
    edited = d.get("arguments")
    changed = d.get("arguments_changed") is True
    if changed and not isinstance(edited, dict):
        raise bad("`arguments_changed` without the edited `arguments`")
    token = _opt_str(d, "token")
    # Only an approved call (or one an approving default let go at its expiry) has a token:
    # found by review, a `rejected` record carrying one was read as an approval.
    if token is not None and status not in ("approved", "expired"):
        raise bad(f"a token on a {status} approval")
    return Approval(
        id=_str(d, "id"),
        status=status,
        agent=_str(d, "agent"),
        session_id=_str(d, "session_id"),
        call=Call(tool=_str(c, "tool"), server=_opt_str(c, "server"), arguments=args),
        call_hash=_str(d, "call_hash"),
        message=_str(d, "message"),
        risk_tier=_str(d, "risk_tier"),
        expires_at=_str(d, "expires_at"),
        arguments_changed=changed,
        arguments=edited if isinstance(edited, dict) else None,
        scope=_opt_str(d, "scope"),
        code=_opt_str(d, "code"),
        reason=_opt_str(d, "reason"),
        token=token,
        token_expires_at=_opt_str(d, "token_expires_at"),
        raw=d,
    )


@dataclass(frozen=True)
class Redeemed:
    """``200`` to a redemption: the token is spent and the call may run now, with
    ``arguments``: the call's arguments as its ``call_hash`` reads them (each number spelt as
    the approver saw it: an agent's ``1e3`` for an approved ``1000`` is ``1000`` here)."""

    call_hash: str
    approval_id: str
    token_id: str
    agent: str | None = None
    arguments: dict[str, JSON] | None = None


def parse_redeemed(body: JSON) -> Redeemed:
    """Reads the answer to ``POST /v1/tokens/redeem`` (``agent`` and ``arguments`` are
    ``None`` from an older gateway that does not send them: the token is spent either way)."""
    d = _obj(body, "the redemption")
    args = d.get("arguments")
    return Redeemed(
        call_hash=_str(d, "call_hash"),
        approval_id=_str(d, "approval_id"),
        token_id=_str(d, "token_id"),
        agent=_opt_str(d, "agent"),
        arguments=args if isinstance(args, dict) else None,
    )


def error_from(status: int, body: JSON, text: str) -> AssentError:
    """The exception for a non-2xx answer with JSON body ``body`` (``None`` if not JSON)."""
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        msg = body.get("message") or body.get("reason") or ""
        return AssentError(body["code"], str(msg), status, body)
    return AssentError(f"HTTP_{status}", text[:200], status, body)
