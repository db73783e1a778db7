"""HTTP clients for an agent's side of the gateway: propose a tool call
(``POST /v1/tool-calls``), wait for its approval (long-poll ``GET /v1/approvals/{id}?wait=S``),
redeem the token for exactly that call (``POST /v1/tokens/redeem``), cancel a wait, report a
result (``POST /v1/tool-results``). :class:`AssentClient` is synchronous,
:class:`AsyncAssentClient` the same over ``asyncio``; both use ``httpx``."""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from .wire import (
    JSON,
    Allowed,
    Approval,
    AssentError,
    Denied,
    GateAnswer,
    Pending,
    Redeemed,
    bad,
    error_from,
    parse_approval,
    parse_gate_answer,
    parse_redeemed,
)

T = TypeVar("T")

MAX_WAIT_SECONDS = 60
"""The longest long-poll the gateway grants (``wait`` ≤ 60 s)."""


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    body: dict[str, JSON] | None = None
    params: dict[str, str] | None = None
    extra_timeout: float = 0.0


def _drop_none(d: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in d.items() if v is not None}


def _decode(r: httpx.Response) -> JSON:
    try:
        return r.json()
    except ValueError:
        return None


def _read(r: httpx.Response, parse: Callable[[JSON], T], ok: tuple[int, ...] = (200,)) -> T:
    body = _decode(r)
    if r.status_code in ok:
        return parse(body)
    raise error_from(r.status_code, body, r.text)


_GATE_STATUS: dict[int, type] = {200: Allowed, 202: Pending, 403: Denied}
"""The one HTTP status each gate answer comes with (the gateway's contract)."""


def _read_gate(r: httpx.Response) -> GateAnswer:
    # A policy denial is a 403 whose body is a gate answer, not an error body.
    body = _decode(r)
    if r.status_code in (200, 202) or (
        r.status_code == 403 and isinstance(body, dict) and body.get("decision") == "deny"
    ):
        answer = parse_gate_answer(body)
        # Found by review: a 202 saying `allow` (no token) was read as a plain allow; an
        # answer whose status and decision disagree is not the gateway's.
        if not isinstance(answer, _GATE_STATUS[r.status_code]):
            raise bad(f"a {r.status_code} answer saying {answer.decision!r}")
        return answer
    raise error_from(r.status_code, body, r.text)


def _read_result(r: httpx.Response) -> Pending | None:
    body = _decode(r)
    if r.status_code == 200:
        return None
    if r.status_code == 202:
        answer = parse_gate_answer(body)
        if isinstance(answer, Pending):
            return answer
    raise error_from(r.status_code, body, r.text)


def result_digest(result: JSON) -> tuple[int, str]:
    """The ``output_bytes`` and ``result_sha256`` of a result: over its compact JSON text."""
    text = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode()
    return len(text), hashlib.sha256(text).hexdigest()


class _Requests:
    """Builds every request once, for both clients."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    def propose(
        self,
        tool: str,
        arguments: dict[str, JSON],
        session_id: str,
        server: str | None,
        extra: dict[str, JSON],
    ) -> _Request:
        body = _drop_none(
            {"agent": self.agent, "session_id": session_id, "tool": tool, "server": server}
        )
        body["arguments"] = arguments
        body.update(_drop_none(extra))
        return _Request("POST", "/v1/tool-calls", body)

    @staticmethod
    def approval(approval_id: str, wait: float | None) -> _Request:
        params = None
        extra = 0.0
        if wait is not None and wait > 0:
            seconds = min(int(wait), MAX_WAIT_SECONDS)
            params, extra = {"wait": str(seconds)}, float(seconds)
        return _Request("GET", f"/v1/approvals/{quote(approval_id, safe='')}", None, params, extra)

    @staticmethod
    def redeem(
        token: str,
        tool: str,
        arguments: dict[str, JSON],
        server: str | None,
        device_id: str | None,
    ) -> _Request:
        body = _drop_none({"token": token, "tool": tool, "server": server})
        body["arguments"] = arguments
        body.update(_drop_none({"device_id": device_id}))
        return _Request("POST", "/v1/tokens/redeem", body)

    @staticmethod
    def cancel(approval_id: str, reason: str | None) -> _Request:
        path = f"/v1/approvals/{quote(approval_id, safe='')}/cancel"
        return _Request("POST", path, _drop_none({"reason": reason}))

    def result(
        self,
        tool: str,
        arguments: dict[str, JSON],
        result: JSON,
        session_id: str,
        server: str | None,
        approval_id: str | None,
        preview: str | None,
    ) -> _Request:
        size, digest = result_digest(result)
        body = _drop_none(
            {"agent": self.agent, "session_id": session_id, "tool": tool, "server": server}
        )
        body.update({"arguments": arguments, "output_bytes": size, "result_sha256": digest})
        body.update(_drop_none({"preview": preview, "approval_id": approval_id}))
        return _Request("POST", "/v1/tool-results", body)


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


def _pause(asked: float, deadline: float | None) -> float:
    """Seconds to wait before polling again after a poll sent at ``asked`` (monotonic) came back
    pending: what is left of one second since it was sent, never past ``deadline``. Found by
    review: a gateway (or something in front of it) answering before the wait asked for was
    polled again at once, in a tight loop, until the approval expired."""
    now = time.monotonic()
    pause = max(0.0, 1.0 - (now - asked))
    return pause if deadline is None else min(pause, max(0.0, deadline - now))


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine: ``localhost`` or a loopback address. Found by review:
    any name starting ``127.`` passed (``127.attacker.example``), so the key went in clear."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _trust_env(base_url: str, insecure_http: bool) -> bool:
    """Whether ``httpx`` may use the environment's proxy for a gateway at ``base_url``: never
    for this machine (a loopback host); plain ``http`` to another
    machine is refused unless ``insecure_http``, since the agent key, the arguments and the
    tokens would cross the network in clear. Found by review: both were allowed, so a host with
    ``HTTP_PROXY`` set sent the key of a ``http://127.0.0.1`` gateway to the proxy, as the
    gateway's own clients no longer do. Raises :class:`ValueError` naming the URL."""
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"assent: {base_url!r} is not an http(s) URL of a gateway")
    local = _loopback(url.host)
    if url.scheme == "http" and not local and not insecure_http:
        raise ValueError(
            f"assent: {base_url!r} is plain http to another machine: the agent key, the "
            "arguments and the tokens would cross the network in clear; use https "
            "(or insecure_http=True)"
        )
    return not local


class AssentClient:
    """A synchronous client for agent ``agent`` (the agent id its key belongs to).

    Every method raises :class:`~assent_client.AssentError` on a non-2xx answer (with the
    gateway's ``code``) and on a transport failure (code ``UNREACHABLE``).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        agent: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        insecure_http: bool = False,
    ) -> None:
        trust_env = _trust_env(base_url, insecure_http)
        self._req = _Requests(agent)
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport,
            trust_env=trust_env,
        )

    @property
    def agent(self) -> str:
        """The agent id this client proposes calls for."""
        return self._req.agent

    def close(self) -> None:
        """Closes the connection pool."""
        self._http.close()

    def __enter__(self) -> AssentClient:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, q: _Request) -> httpx.Response:
        try:
            return self._http.request(
                q.method,
                q.path,
                json=q.body,
                params=q.params,
                timeout=self._timeout + q.extra_timeout,
            )
        except httpx.HTTPError as e:
            raise AssentError("UNREACHABLE", str(e)) from e

    def propose(
        self,
        tool: str,
        arguments: dict[str, JSON],
        *,
        session_id: str,
        server: str | None = None,
        **extra: Any,
    ) -> GateAnswer:
        """Proposes a tool call; ``extra`` are the optional request fields (``run_id``,
        ``device_id``, ``trace_id``, ``plan_id``, ``step_id``, ``on_behalf_of``)."""
        return _read_gate(self._send(self._req.propose(tool, arguments, session_id, server, extra)))

    def approval(self, approval_id: str, *, wait: float | None = None) -> Approval:
        """The approval record; with ``wait`` (seconds, at most 60) it long-polls while pending."""
        return _read(self._send(self._req.approval(approval_id, wait)), parse_approval)

    def wait(self, approval_id: str, *, timeout: float | None = None) -> Approval:
        """Long-polls until the approval is no longer pending, or ``timeout`` seconds passed
        (then the still-pending record is returned)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
            asked = time.monotonic()
            a = self.approval(approval_id, wait=max(1.0, min(left, MAX_WAIT_SECONDS)))
            if a.status != "pending" or (deadline is not None and time.monotonic() >= deadline):
                return a
            time.sleep(_pause(asked, deadline))

    def redeem(
        self,
        token: str,
        tool: str,
        arguments: dict[str, JSON],
        *,
        server: str | None = None,
        device_id: str | None = None,
    ) -> Redeemed:
        """Redeems a single-use token for exactly this call, just before it runs: ``409
        TOKEN_USED`` the second time, ``403 TOKEN_MISMATCH`` for any other call."""
        return _read(
            self._send(self._req.redeem(token, tool, arguments, server, device_id)), parse_redeemed
        )

    def cancel(self, approval_id: str, *, reason: str | None = None) -> Approval:
        """Withdraws a pending approval (nobody can approve it afterwards)."""
        return _read(self._send(self._req.cancel(approval_id, reason)), parse_approval)

    def report_result(
        self,
        tool: str,
        arguments: dict[str, JSON],
        result: JSON,
        *,
        session_id: str,
        server: str | None = None,
        approval_id: str | None = None,
        preview: str | None = None,
    ) -> Pending | None:
        """Records a call's result (size and SHA-256 of its compact JSON) in the audit log:
        ``None`` when it may be shown, a :class:`Pending` when it is held for release."""
        q = self._req.result(tool, arguments, result, session_id, server, approval_id, preview)
        return _read_result(self._send(q))


class AsyncAssentClient:
    """:class:`AssentClient` over ``asyncio`` (``httpx.AsyncClient``); same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        agent: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        insecure_http: bool = False,
    ) -> None:
        trust_env = _trust_env(base_url, insecure_http)
        self._req = _Requests(agent)
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport,
            trust_env=trust_env,
        )

    @property
    def agent(self) -> str:
        """The agent id this client proposes calls for."""
        return self._req.agent

    async def aclose(self) -> None:
        """Closes the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAssentClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, q: _Request) -> httpx.Response:
        try:
            return await self._http.request(
                q.method,
                q.path,
                json=q.body,
                params=q.params,
                timeout=self._timeout + q.extra_timeout,
            )
        except httpx.HTTPError as e:
            raise AssentError("UNREACHABLE", str(e)) from e

    async def propose(
        self,
        tool: str,
        arguments: dict[str, JSON],
        *,
        session_id: str,
        server: str | None = None,
        **extra: Any,
    ) -> GateAnswer:
        """See :meth:`AssentClient.propose`."""
        return _read_gate(
            await self._send(self._req.propose(tool, arguments, session_id, server, extra))
        )

    async def approval(self, approval_id: str, *, wait: float | None = None) -> Approval:
        """See :meth:`AssentClient.approval`."""
        return _read(await self._send(self._req.approval(approval_id, wait)), parse_approval)

    async def wait(self, approval_id: str, *, timeout: float | None = None) -> Approval:
        """See :meth:`AssentClient.wait`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
            asked = time.monotonic()
            a = await self.approval(approval_id, wait=max(1.0, min(left, MAX_WAIT_SECONDS)))
            if a.status != "pending" or (deadline is not None and time.monotonic() >= deadline):
                return a
            await asyncio.sleep(_pause(asked, deadline))

    async def redeem(
        self,
        token: str,
        tool: str,
        arguments: dict[str, JSON],
        *,
        server: str | None = None,
        device_id: str | None = None,
    ) -> Redeemed:
        """See :meth:`AssentClient.redeem`."""
        q = self._req.redeem(token, tool, arguments, server, device_id)
        return _read(await self._send(q), parse_redeemed)

    async def cancel(self, approval_id: str, *, reason: str | None = None) -> Approval:
        """See :meth:`AssentClient.cancel`."""
        return _read(await self._send(self._req.cancel(approval_id, reason)), parse_approval)

    async def report_result(
        self,
        tool: str,
        arguments: dict[str, JSON],
        result: JSON,
        *,
        session_id: str,
        server: str | None = None,
        approval_id: str | None = None,
        preview: str | None = None,
    ) -> Pending | None:
        """See :meth:`AssentClient.report_result`."""
        q = self._req.result(tool, arguments, result, session_id, server, approval_id, preview)
        return _read_result(await self._send(q))
