"""Typed client for the assent approval gateway (``POST /v1/tool-calls``, long-polled
``GET /v1/approvals/{id}?wait=S``, ``POST /v1/tokens/redeem``) and the approval logic its
framework adapters share. The adapters live in submodules that import their framework:
:mod:`assent_client.openai_agents` (OpenAI Agents SDK) and :mod:`assent_client.langchain_hitl`
(LangChain/LangGraph human-in-the-loop middleware)."""

from .client import MAX_WAIT_SECONDS, AssentClient, AsyncAssentClient, result_digest
from .gate import NOT_APPROVED, Approver, AsyncApprover, Verdict, call_key
from .wire import (
    Allowed,
    Approval,
    ApprovalStatus,
    AssentError,
    Call,
    Denied,
    GateAnswer,
    Pending,
    Reason,
    Redeemed,
)

__all__ = [
    "MAX_WAIT_SECONDS",
    "NOT_APPROVED",
    "Allowed",
    "Approval",
    "ApprovalStatus",
    "Approver",
    "AssentClient",
    "AssentError",
    "AsyncApprover",
    "AsyncAssentClient",
    "Call",
    "Denied",
    "GateAnswer",
    "Pending",
    "Reason",
    "Redeemed",
    "Verdict",
    "call_key",
    "result_digest",
]
