"""End to end: the Python package `assent-client` (clients/python) against a real `assent serve`:
its client (propose, long-poll, redeem, cancel, result), and its adapters driving the real
OpenAI Agents SDK and the real LangChain/LangGraph human-in-the-loop middleware with scripted
models (no network). A human decides with the real CLI (`assent approve` / `assent deny`, in a
thread, while the adapter waits); an approved call runs once with the approved arguments, a
denied one does not run and the model reads the reason and re-plans."""

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest

from test_dashboard import ASSENT, ROOT, free_port

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # nothing leaves the machine
os.environ["LANGSMITH_TRACING"] = "false"

from assent_client import (  # noqa: E402
    NOT_APPROVED,
    Allowed,
    Approver,
    AssentClient,
    AssentError,
    AsyncApprover,
    AsyncAssentClient,
    Denied,
    Pending,
)
from assent_client.gate import Verdict  # noqa: E402

OPERATOR_KEY = "op-" + os.urandom(16).hex()
AGENT_KEY = "agent-" + os.urandom(8).hex()
AGENT = "helper_bot"
PAYMENT = {"amount": 5000, "currency": "EUR", "recipient": "ext-acme"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    d = tmp_path_factory.mktemp("pyclient")
    (d / "agents").mkdir()
    (d / "agents" / "helper.agf.yaml").write_text(
        f"metadata: {{id: {AGENT}, name: Helper Bot, version: 1.0.0, description: python e2e}}\n"
        "action_space:\n  local_tools:\n    - alias: get_balance\n    - alias: wipe_disk\n"
        "    - alias: transfer_funds\n      approval:\n"
        '        message_template: "Transfer {{tool_args.amount}} to {{tool_args.recipient}}?"\n'
    )
    (d / "gov").mkdir()
    (d / "gov" / "pay.yaml").write_text(
        "policies:\n  - id: helper.v1\n    selector: {agents: [\"*\"]}\n    rules:\n"
        "      - {tool: transfer_funds, risk_tier: R3, approvers: [finance]}\n"
        "      - {tool: get_balance, risk_tier: R0}\n"
        "      - tool: wipe_disk\n        deny: {message_template: \"never wipe {{tool_args.device}}\"}\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (d / "assent.yaml").write_text(
        f"""
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
governance: ["gov/*.yaml"]
principals:
  - {{name: alice, kind: operator, roles: [finance], key_env: E2E_ALICE_KEY}}
  - {{name: helper, kind: agent, agent_id: {AGENT}, key_sha256: "{hashlib.sha256(AGENT_KEY.encode()).hexdigest()}"}}
"""
    )
    log = open(d / "serve.log", "a")
    proc = subprocess.Popen([ASSENT, "serve", "--config", str(d / "assent.yaml")],
                            env=dict(os.environ, E2E_ALICE_KEY=OPERATOR_KEY), stdout=log, stderr=log)
    try:
        for _ in range(100):
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("gateway did not start: " + (d / "serve.log").read_text())
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def cli(url, *args):
    """The real CLI as the operator: `assent approve ID …` / `assent deny ID …`."""
    r = subprocess.run([ASSENT, *args], env=dict(os.environ, ASSENT_URL=url, ASSENT_API_KEY=OPERATOR_KEY),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def pending_of(url, session):
    r = httpx.get(url + "/v1/approvals", params={"status": "pending"},
                  headers={"Authorization": f"Bearer {OPERATOR_KEY}"}, timeout=10)
    r.raise_for_status()
    return [a for a in r.json()["approvals"] if a["session_id"] == session]


class Human(threading.Thread):
    """A person at the CLI: waits until the session has a pending approval (while the adapter
    long-polls it), then runs `assent <verb> ID <args…>` on it; once per entry of `steps`."""

    def __init__(self, url, session, *steps):
        super().__init__(daemon=True)
        self.url, self.session, self.steps = url, session, list(steps)
        self.decided, self.error = [], None

    def run(self):
        try:
            for verb, *args in self.steps:
                deadline = time.monotonic() + 60
                while not (found := pending_of(self.url, self.session)):
                    assert time.monotonic() < deadline, "no approval was proposed"
                    time.sleep(0.05)
                cli(self.url, verb, found[0]["id"], *args)
                self.decided.append(found[0])
        except BaseException as e:  # reported by finish()
            self.error = e

    def finish(self):
        self.join(90)
        assert not self.is_alive()
        if self.error:
            raise self.error
        return self.decided


def session():
    return "s-" + uuid.uuid4().hex[:12]


def client(url):
    return AssentClient(url, AGENT_KEY, AGENT)


# --- the client against the live server ----------------------------------------------------


def test_client_propose_allowed_pending_and_denied(gateway):
    s = session()
    with client(gateway) as c:
        ok = c.propose("get_balance", {"account": "main"}, session_id=s)
        assert isinstance(ok, Allowed) and ok.token is None and ok.risk_tier == "R0"
        assert len(ok.call_hash) == 64
        held = c.propose("transfer_funds", PAYMENT, session_id=s)
        assert isinstance(held, Pending) and held.risk_tier == "R3"
        assert held.message == "Transfer 5000 to ext-acme?"
        no = c.propose("wipe_disk", {"device": "/dev/sda"}, session_id=s)
        assert isinstance(no, Denied) and no.reason == "never wipe /dev/sda"
        a = c.approval(held.approval_id)
        assert a.status == "pending" and a.call.arguments == PAYMENT and a.token is None
        cancelled = c.cancel(held.approval_id, reason="changed my mind")
        assert cancelled.status == "cancelled" and cancelled.code == "TOOL_DENIED"


def test_client_keeps_its_key_off_other_machines_in_clear_and_off_proxies(gateway, monkeypatch):
    """Found by review: the client sent the agent key, the arguments and the tokens over plain
    http to any host, and through the environment's proxy to a gateway on this machine (the
    gateway's own clients do neither). Plain http to another machine is refused unless asked
    for; a loopback gateway is reached directly whatever HTTP_PROXY says."""
    for make in (AssentClient, AsyncAssentClient):
        with pytest.raises(ValueError, match="plain http to another machine"):
            make("http://assent.example:7878", AGENT_KEY, AGENT)
        with pytest.raises(ValueError, match="not an http"):
            make("ftp://assent.example", AGENT_KEY, AGENT)
        # Found by review: any name starting `127.` passed as this machine.
        with pytest.raises(ValueError, match="plain http to another machine"):
            make("http://127.attacker.example:7878", AGENT_KEY, AGENT)
        for ok in ("https://assent.example", "http://[::1]:7878", "http://localhost:7878",
                   "http://127.0.0.2:7878"):
            make(ok, AGENT_KEY, AGENT)
        make("http://assent.example:7878", AGENT_KEY, AGENT, insecure_http=True)
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with client(gateway) as c:
        ok = c.propose("get_balance", {"account": "main"}, session_id=session())
        assert isinstance(ok, Allowed), ok


def test_client_redeems_once_and_only_for_the_approved_call(gateway):
    s = session()
    with client(gateway) as c:
        held = c.propose("transfer_funds", PAYMENT, session_id=s)
        assert isinstance(held, Pending)
        cli(gateway, "approve", held.approval_id, "--reason", "invoice 4711")
        a = c.wait(held.approval_id, timeout=30)
        assert a.status == "approved" and a.token
        with pytest.raises(AssentError) as e:
            c.redeem(a.token, "transfer_funds", {**PAYMENT, "amount": 50000})
        assert e.value.code == "TOKEN_MISMATCH" and e.value.status == 403
        # The agent's 5e3 hashes as the approved 5000; the answer says what to run: 5000.
        r = c.redeem(a.token, "transfer_funds", {**PAYMENT, "amount": 5e3})
        assert r.approval_id == held.approval_id and r.call_hash == held.call_hash
        assert r.arguments == PAYMENT and type(r.arguments["amount"]) is int, r.arguments
        with pytest.raises(AssentError) as e:
            c.redeem(a.token, "transfer_funds", PAYMENT)
        assert e.value.code == "TOKEN_USED" and e.value.status == 409
        assert c.report_result("transfer_funds", PAYMENT, {"ok": True}, session_id=s,
                               approval_id=held.approval_id) is None


def test_client_long_poll_returns_the_decision_and_an_operator_edit(gateway):
    s = session()
    edited = {**PAYMENT, "amount": 900}
    with client(gateway) as c:
        held = c.propose("transfer_funds", PAYMENT, session_id=s)
        human = Human(gateway, s, ("approve", "--args", json.dumps(edited)))
        human.start()
        a = c.wait(held.approval_id)  # long-polls while the person decides
        human.finish()
        assert a.arguments_changed and a.effective_arguments == edited
        with pytest.raises(AssentError) as e:
            c.redeem(a.token, "transfer_funds", PAYMENT)
        assert e.value.code == "TOKEN_MISMATCH"
        c.redeem(a.token, "transfer_funds", edited)


def test_client_wait_paces_polls_answered_before_their_wait(gateway):
    """Found by review: a poll answered `pending` before the wait it asked for (a proxy, a
    gateway shutting down) was sent again at once, in a tight loop until the approval expired.
    Such polls are a second apart."""
    with client(gateway) as c:
        held = c.propose("transfer_funds", PAYMENT, session_id=session())
        body = httpx.get(f"{gateway}/v1/approvals/{held.approval_id}",
                         headers={"Authorization": f"Bearer {AGENT_KEY}"}).json()
        c.cancel(held.approval_id)
    assert body["status"] == "pending", body
    polls = []

    def answer(request):
        polls.append(request.url.path)
        return httpx.Response(200, json=body)

    with AssentClient(gateway, AGENT_KEY, AGENT, transport=httpx.MockTransport(answer)) as c:
        assert c.wait(held.approval_id, timeout=2.5).status == "pending"
    assert 2 <= len(polls) <= 4, len(polls)

    async def waited():
        async with AsyncAssentClient(gateway, AGENT_KEY, AGENT,
                                     transport=httpx.MockTransport(answer)) as c:
            return await c.wait(held.approval_id, timeout=2.5)
    polls.clear()
    assert asyncio.run(waited()).status == "pending"
    assert 2 <= len(polls) <= 4, len(polls)


def test_client_errors_carry_the_gateways_code(gateway):
    with AssentClient(gateway, "not-a-key", AGENT) as c, pytest.raises(AssentError) as e:
        c.propose("get_balance", {}, session_id=session())
    assert e.value.code == "UNAUTHENTICATED" and e.value.status == 401
    with AssentClient(gateway, AGENT_KEY, "someone_else") as c, pytest.raises(AssentError) as e:
        c.propose("get_balance", {}, session_id=session())
    assert e.value.status == 403 and e.value.code == "FORBIDDEN"
    with client(gateway) as c, pytest.raises(AssentError) as e:
        c.redeem("eyJub3QiOiJhIHRva2VuIn0.e30.AAAA", "transfer_funds", PAYMENT)
    assert e.value.code == "TOKEN_INVALID"


def test_client_refuses_an_allow_that_carries_a_token_without_its_approval(gateway):
    """A gateway answer (or a proxy's rewrite of one) that says `allow` with a grant's token
    but no `approval_id` is refused, not read as a plain allow: a token must never be skipped.
    The answer is the live gateway's own `allow`, with the `approval_id` taken out."""
    real = httpx.post(gateway + "/v1/tool-calls", headers={"Authorization": f"Bearer {AGENT_KEY}"},
                      json={"agent": AGENT, "session_id": session(), "tool": "get_balance",
                            "arguments": {}}, timeout=10).json()
    assert real["decision"] == "allow"
    forged = {**real, "token": "eyJhbGciOiJFZERTQSJ9.e30.AAAA", "scope": "session"}
    forged.pop("approval_id", None)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=forged))
    with AssentClient(gateway, AGENT_KEY, AGENT, transport=transport) as c, pytest.raises(AssentError) as e:
        c.propose("get_balance", {}, session_id=session())
    assert e.value.code == "BAD_RESPONSE"


def test_client_refuses_answers_that_contradict_themselves(gateway):
    """Found by review: a 202 saying `allow` was read as a plain allow, and an approval record
    saying `rejected` but carrying a token as an approval. Both are refused (BAD_RESPONSE); the
    answers are the live gateway's own, changed the way a broken proxy would."""
    allow = httpx.post(gateway + "/v1/tool-calls", headers={"Authorization": f"Bearer {AGENT_KEY}"},
                       json={"agent": AGENT, "session_id": session(), "tool": "get_balance",
                             "arguments": {}}, timeout=10).json()
    assert allow["decision"] == "allow"
    with client(gateway) as c:
        held = c.propose("transfer_funds", PAYMENT, session_id=session())
        assert isinstance(held, Pending), held
        record = c.approval(held.approval_id).raw
        c.cancel(held.approval_id, reason="test over")
    forged = {**record, "status": "rejected", "token": "eyJhbGciOiJFZERTQSJ9.e30.AAAA"}
    for status, body, ask in [
        (202, allow, lambda c: c.propose("get_balance", {}, session_id=session())),
        (200, forged, lambda c: c.approval(held.approval_id)),
    ]:
        transport = httpx.MockTransport(lambda request, s=status, b=body: httpx.Response(s, json=b))
        with AssentClient(gateway, AGENT_KEY, AGENT, transport=transport) as c:
            with pytest.raises(AssentError) as e:
                ask(c)
            assert e.value.code == "BAD_RESPONSE", e.value


def test_a_refused_or_unsendable_call_is_told_to_the_model_not_raised(gateway):
    """Found by review: an error from the gateway (here `400` for a number a double cannot hold)
    or arguments JSON cannot carry (NaN) ended the whole agent run; the call does not run and
    the model reads why. And a verdict's token stays out of its repr (logs)."""
    approver = Approver(client(gateway), session_id=session())
    v = approver.decide("transfer_funds", {**PAYMENT, "amount": 9007199254740993})
    assert not v.approved and "assent refused to run `transfer_funds`" in v.reason, v
    v = approver.decide("transfer_funds", {**PAYMENT, "amount": float("nan")})
    assert not v.approved and "cannot be sent" in v.reason, v
    approver.allow(Verdict(True, "transfer_funds", None, {"amount": float("nan")},
                           token="eyJ.secret-token"))
    assert "eyJ.secret-token" not in repr(approver._passes.ready)
    said = approver.redeem_for("transfer_funds", {"amount": float("nan")})
    assert said is not None and "cannot be sent" in said, said


def test_a_wait_that_fails_is_told_as_such_not_as_a_refusal(gateway):
    """Found by review: a wait that failed after the call was held (the gateway gone, an answer
    this client cannot read) was told to the model as a refusal while the request was still
    pending and an operator could still approve it. The adapter tries to withdraw it and says
    which happened. The propose answer is the live gateway's own; then the gateway is gone."""
    with client(gateway) as c:
        held = c.propose("transfer_funds", PAYMENT, session_id=session())
        assert isinstance(held, Pending), held
        c.cancel(held.approval_id, reason="test over")
    pending = held.raw

    def gone(request):
        if request.url.path == "/v1/tool-calls":
            return httpx.Response(202, json=pending)
        return httpx.Response(503, json={"code": "STORE_UNAVAILABLE", "message": "gone"})

    transport = httpx.MockTransport(gone)
    approver = Approver(AssentClient(gateway, AGENT_KEY, AGENT, transport=transport),
                        session_id=session())
    v = approver.decide("transfer_funds", PAYMENT)
    assert not v.approved and v.approval_id == held.approval_id, v
    assert "the wait for a decision failed" in v.reason, v
    assert "could not be withdrawn: it may still be approved" in v.reason, v


def test_async_client_waits_for_a_denial(gateway):
    s = session()

    async def go():
        async with AsyncAssentClient(gateway, AGENT_KEY, AGENT) as c:
            held = await c.propose("transfer_funds", PAYMENT, session_id=s)
            human = Human(gateway, s, ("deny", "--reason", "not this month"))
            human.start()
            a = await c.wait(held.approval_id)
            human.finish()
            return a

    a = asyncio.run(go())
    assert a.status == "rejected" and a.token is None and a.reason.endswith(": not this month")


# --- OpenAI Agents SDK ----------------------------------------------------------------------

from pyclient_frameworks import EDITED, agents_run, langchain_run  # noqa: E402


def test_agents_sdk_held_call_runs_once_after_assent_approve(gateway):
    s = session()
    human = Human(gateway, s, ("approve", "--reason", "invoice 4711"))
    human.start()
    out = agents_run(AsyncAssentClient(gateway, AGENT_KEY, AGENT), s, steps="approve")
    (decided,) = human.finish()
    assert sorted(out.ran) == [("get_balance", {"account": "main"}), ("transfer_funds", PAYMENT)]
    assert out.final == "Paid."
    assert decided["call"]["arguments"] == PAYMENT
    # The token was spent by the tool's guardrail, for that call.
    with client(gateway) as c:
        a = c.approval(decided["id"])
        assert a.status == "approved"
        with pytest.raises(AssentError) as e:
            c.redeem(a.token, "transfer_funds", PAYMENT)
        assert e.value.code == "TOKEN_USED"


def test_agents_sdk_denied_call_is_replanned(gateway):
    s = session()
    human = Human(gateway, s, ("deny", "--reason", "use the EUR account"))
    human.start()
    out = agents_run(AsyncAssentClient(gateway, AGENT_KEY, AGENT), s, steps="deny")
    human.finish()
    assert out.ran == [("get_balance", {"account": "eur"})]  # not the transfer
    assert "use the EUR account" in out.rejection_seen
    assert out.final == "Checked the balance instead."


def test_agents_sdk_operator_edit_runs_only_the_edited_call(gateway):
    """The SDK cannot change a pending call's arguments: the adapter rejects the model's call
    with the approved arguments, keeps the token, and the model's call with exactly those
    arguments runs under it (no second approval)."""
    s = session()
    human = Human(gateway, s, ("approve", "--args", json.dumps(EDITED)))
    human.start()
    out = agents_run(AsyncAssentClient(gateway, AGENT_KEY, AGENT), s, steps="edit")
    human.finish()
    assert out.ran == [("transfer_funds", EDITED)]
    assert '"amount": 900' in out.rejection_seen
    assert out.final == "Paid."
    assert pending_of(gateway, s) == []


def test_agents_sdk_approval_outside_assent_does_not_run_the_tool(gateway):
    """An interruption approved in the RunState by anyone but assent: the gated tool's guardrail
    finds no token for the call and refuses it."""
    out = agents_run(AsyncAssentClient(gateway, AGENT_KEY, AGENT), session(), steps="bypass")
    assert out.ran == []
    assert NOT_APPROVED in out.rejection_seen


# --- LangChain / LangGraph human-in-the-loop ------------------------------------------------


@pytest.mark.parametrize("mode,use_async", [("batched", False), ("per_call", False), ("per_call", True)])
def test_langchain_held_call_runs_once_after_assent_approve(gateway, mode, use_async):
    s = session()
    human = Human(gateway, s, ("approve", "--reason", "ok"))
    human.start()
    out = langchain_run(Approver(client(gateway), session_id=s), mode, "approve", use_async)
    (decided,) = human.finish()
    assert sorted(out.ran) == [("get_balance", {"account": "main"}), ("transfer_funds", PAYMENT)]
    assert out.final == "Paid."
    with client(gateway) as c, pytest.raises(AssentError) as e:
        c.redeem(c.approval(decided["id"]).token, "transfer_funds", PAYMENT)
    assert e.value.code == "TOKEN_USED"


def test_langchain_denied_call_is_replanned(gateway):
    s = session()
    human = Human(gateway, s, ("deny", "--reason", "use the EUR account"))
    human.start()
    out = langchain_run(Approver(client(gateway), session_id=s), "batched", "deny")
    human.finish()
    assert out.ran == [("get_balance", {"account": "eur"})]
    assert "use the EUR account" in out.rejection_seen
    assert out.final == "Checked the balance instead."


def test_langchain_operator_edit_runs_the_edited_call(gateway):
    s = session()
    human = Human(gateway, s, ("approve", "--args", json.dumps(EDITED)))
    human.start()
    out = langchain_run(Approver(client(gateway), session_id=s), "batched", "approve")
    human.finish()
    assert sorted(out.ran) == [("get_balance", {"account": "main"}), ("transfer_funds", EDITED)]


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_langchain_approval_outside_assent_does_not_run_the_tool(gateway, mode):
    """The interrupt answered `approve` by someone else than assent: the redeeming middleware
    finds no approval for the call, so the tool does not run and the model reads why."""
    out = langchain_run(Approver(client(gateway), session_id=session()), mode, "bypass")
    assert out.ran == []
    assert NOT_APPROVED in out.rejection_seen


def test_async_approver_refuses_a_call_it_never_approved(gateway):
    approver = AsyncApprover(AsyncAssentClient(gateway, AGENT_KEY, AGENT), session_id=session())
    assert asyncio.run(approver.redeem_for("transfer_funds", PAYMENT)) == NOT_APPROVED


def test_client_type_checks_strictly(tmp_path):
    """mypy --strict over the client and the shared approval logic (the adapters too, when
    ASSENT_MYPY_ADAPTERS=1: that pulls in both frameworks' sources and takes a minute)."""
    pytest.importorskip("mypy")
    src = ROOT / "clients" / "python" / "src" / "assent_client"
    files = ["__init__.py", "client.py", "wire.py", "gate.py"]
    if os.environ.get("ASSENT_MYPY_ADAPTERS") == "1":
        files += ["openai_agents.py", "langchain_hitl.py"]
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                        *(str(src / f) for f in files)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
