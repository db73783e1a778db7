"""End to end: what leaves assent for a stack's observability (issue 15 §1, §2), checked with
the ecosystem's own decoders against a real `assent serve`:

- traces exported over OTLP/HTTP to a receiver in this test, decoded as the real protobuf
  messages (`opentelemetry-proto`): the agent's `traceparent` is the parent of the request
  span; propose, wait, decision and redeem spans carry the approval's attributes; the
  decision is in the proposal's trace; AAEP `correlation_id` and MPLP `trace_id` carry the
  trace id;
- `/metrics` parsed with the official Prometheus client's OpenMetrics parser
  (`prometheus-client`, which also checks the format: `# EOF`, names, types), who
  may read it, and the families moving with a real approval's life.
"""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from test_dashboard import ASSENT, free_port

OPERATOR_KEY = "op-" + os.urandom(16).hex()
AGENT_KEY = "agent-" + os.urandom(16).hex()
SCRAPE_KEY = "scrape-" + os.urandom(16).hex()
TRACE_ID = os.urandom(16).hex()
AGENT_SPAN = os.urandom(8).hex()


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: every span of every export, decoded."""

    spans = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        with Receiver.lock:
            for rs in req.resource_spans:
                service = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        Receiver.spans.append((service, s))
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def attrs(span):
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else (
            v.int_value if v.HasField("int_value") else v.bool_value)
    return out


def otel_env(otlp_port, service="assent-e2e"):
    return dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp_port}",
                OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME=service)


def serve(tmp_path, otlp_port, extra=""):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "ops.agf.yaml").write_text(
        "metadata: {id: ops_bot, name: Ops Bot, version: 1.0.0, description: observability e2e}\n"
        "action_space:\n  local_tools:\n    - alias: deploy\n      approval: true\n"
        "    - alias: status\n      approval: false\n"
        "  mcp_servers:\n    - alias: up\n      allowed_tools:\n        - name: echo\n"
    )
    port = free_port()
    (tmp_path / "assent.yaml").write_text(f"""
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
metrics_key_env: E2E_SCRAPE_KEY
{extra}
principals:
  - {{name: alice, kind: operator, key_env: E2E_ALICE_KEY}}
  - {{name: ops-bot, kind: agent, agent_id: ops_bot, key_sha256: "{hashlib.sha256(AGENT_KEY.encode()).hexdigest()}"}}
""")
    env = dict(otel_env(otlp_port), E2E_ALICE_KEY=OPERATOR_KEY, E2E_SCRAPE_KEY=SCRAPE_KEY)
    log = open(tmp_path / "serve.log", "a")
    proc = subprocess.Popen([ASSENT, "serve", "--config", str(tmp_path / "assent.yaml")],
                            env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1)
            return proc, url, log
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gateway did not start: " + (tmp_path / "serve.log").read_text())


def call(url, method, path, key=None, body=None, headers=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read().decode()
            return r.status, (json.loads(raw) if raw.startswith("{") else raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")


def metrics(url, key=OPERATOR_KEY):
    status, text = call(url, "GET", "/metrics", key)
    assert status == 200, text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(m, name, **labels):
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_for(pred, what, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        with Receiver.lock:
            found = pred(list(Receiver.spans))
        if found:
            return found
        time.sleep(0.1)
    with Receiver.lock:
        names = sorted({s.name[:80] for _, s in Receiver.spans})
    raise AssertionError(f"no {what} among the exported spans {names}")


def test_an_approval_life_is_one_trace_and_moves_the_metrics(tmp_path):
    with Receiver.lock:
        Receiver.spans.clear()
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    proc, url, log = serve(tmp_path, otlp.server_address[1])
    try:
        before = metrics(url)
        traceparent = f"00-{TRACE_ID}-{AGENT_SPAN}-01"
        deploy = {"agent": "ops_bot", "session_id": "s1", "tool": "deploy",
                  "arguments": {"service": "api", "version": "1.2.3"}}
        status, held = call(url, "POST", "/v1/tool-calls", AGENT_KEY, deploy,
                            {"traceparent": traceparent})
        assert status == 202, held
        aid = held["approval_id"]
        assert call(url, "POST", "/v1/tool-calls", AGENT_KEY,
                    {**deploy, "tool": "status", "arguments": {}})[0] == 200

        m = metrics(url)
        assert sample(m, "assent_pending_approvals", risk_tier=held["risk_tier"]) == 1
        assert sample(m, "assent_verdicts_total", verdict="confirm", outcome="held") == 1
        assert sample(m, "assent_verdicts_total", verdict="allow", outcome="allowed") == 1
        assert sample(m, "assent_store_commit_duration_seconds_count") > \
            sample(before, "assent_store_commit_duration_seconds_count")

        # A long-poll in flight is a waiter; the operator's decision ends it.
        polled = {}
        poll = threading.Thread(target=lambda: polled.update(
            r=call(url, "GET", f"/v1/approvals/{aid}?wait=30", AGENT_KEY)))
        poll.start()
        for _ in range(100):
            if sample(metrics(url), "assent_long_poll_waiters") == 1:
                break
            time.sleep(0.05)
        assert sample(metrics(url), "assent_long_poll_waiters") == 1
        status, _ = call(url, "POST", f"/v1/approvals/{aid}/decision", OPERATOR_KEY,
                         {"decision": "approve", "reason": "release window"})
        assert status == 200
        poll.join(30)
        status, approval = polled["r"]
        assert status == 200 and approval["status"] == "approved", approval

        redeem = {"token": approval["token"], "tool": "deploy", "arguments": deploy["arguments"]}
        assert call(url, "POST", "/v1/tokens/redeem", AGENT_KEY, redeem)[0] == 200
        assert call(url, "POST", "/v1/tokens/redeem", AGENT_KEY, redeem)[0] == 409

        m = metrics(url)
        assert sample(m, "assent_pending_approvals", risk_tier=held["risk_tier"]) == 0
        assert sample(m, "assent_decisions_total", outcome="approved") == 1
        assert sample(m, "assent_time_to_decision_seconds_count", outcome="approved") == 1
        assert sample(m, "assent_token_redemptions_total", result="redeemed") == 1
        assert sample(m, "assent_token_redemptions_total", result="token_used") == 1
        assert sample(m, "assent_long_poll_waiters") == 0

        # tracestate travels with the trace, but one over W3C's 512 bytes is dropped (a caller
        # must not make every span of its trace carry a large header into the export queue).
        small, big = os.urandom(16).hex(), os.urandom(16).hex()
        status_call = {**deploy, "tool": "status", "arguments": {}}
        for tid_, state in ((small, "vendor=abc"), (big, "vendor=" + "x" * 600)):
            assert call(url, "POST", "/v1/tool-calls", AGENT_KEY, status_call,
                        {"traceparent": f"00-{tid_}-{AGENT_SPAN}-01", "tracestate": state})[0] == 200
        for tid_, want in ((small, "vendor=abc"), (big, "")):
            span = wait_for(lambda ss: [s for _, s in ss if s.name == "POST /v1/tool-calls"
                                        and s.trace_id == bytes.fromhex(tid_)], "tracestate span")
            assert span[0].trace_state == want, span[0].trace_state

        # The scrape key reads the metrics and nothing else; an agent's key reads neither.
        assert call(url, "GET", "/metrics", SCRAPE_KEY)[0] == 200
        assert call(url, "GET", "/v1/approvals", SCRAPE_KEY)[0] == 401
        assert call(url, "GET", "/metrics", AGENT_KEY)[0] == 403
        assert call(url, "GET", "/metrics")[0] == 401
        assert call(url, "GET", "/metrics", "wrong-" + os.urandom(16).hex())[0] == 401

        # The request span is the child of the agent's span, in the agent's trace.
        tid = bytes.fromhex(TRACE_ID)
        request = wait_for(lambda ss: [s for _, s in ss if s.name == "POST /v1/tool-calls"
                                       and s.trace_id == tid], "request span in the agent's trace")
        assert request[0].parent_span_id == bytes.fromhex(AGENT_SPAN)
        assert attrs(request[0])["http.response.status_code"] == 202
        propose = wait_for(lambda ss: [s for _, s in ss if s.name == "assent.propose"
                                       and s.trace_id == tid], "assent.propose span")[0]
        a = attrs(propose)
        assert a["assent.approval_id"] == aid
        assert a["assent.call_hash"] == held["call_hash"]
        assert (a["assent.verdict"], a["assent.agent"], a["assent.tool"]) == \
            ("confirm", "ops_bot", "deploy")
        assert a["assent.risk_tier"] == held["risk_tier"]
        assert propose.parent_span_id == request[0].span_id
        # The operator's decision joins the proposal's trace, linked to the request that made it.
        decision = wait_for(lambda ss: [s for _, s in ss if s.name == "assent.decision"],
                            "assent.decision span")[0]
        assert decision.trace_id == tid
        assert attrs(decision)["assent.outcome"] == "approved"
        assert len(decision.links) == 1 and decision.links[0].trace_id != tid
        redeems = wait_for(lambda ss: [s for _, s in ss if s.name == "assent.redeem"]
                           if len([1 for _, s in ss if s.name == "assent.redeem"]) == 2 else None,
                           "two assent.redeem spans")
        assert sorted(attrs(s)["assent.outcome"] for s in redeems) == ["redeemed", "token_used"]
        assert all(attrs(s)["assent.call_hash"] == held["call_hash"] for s in redeems)
        wait_for(lambda ss: [s for _, s in ss if s.name == "assent.wait"
                             and attrs(s).get("assent.outcome") == "approved"], "assent.wait span")
        services = {svc.get("service.name") for svc, _ in Receiver.spans}
        assert services == {"assent-e2e"}

        # The protocols carry the trace id: AAEP correlation_id is the proposal's traceparent,
        # the MPLP trace_id is made of the W3C trace id.
        db = sqlite3.connect(tmp_path / "data" / "assent.db")
        events = [json.loads(d) for (d,) in db.execute(
            "SELECT data FROM aaep_events WHERE approval_id = ?", (aid,))]
        db.close()
        assert events, "no AAEP event of the approval"
        for ev in events:
            assert ev["correlation_id"].split("-")[1] == TRACE_ID, ev
            assert ev["correlation_id"].split("-")[2] == propose.span_id.hex(), ev
        status, confirm = call(url, "GET", f"/v1/approvals/{aid}?format=mplp", OPERATOR_KEY)
        mplp = confirm["trace"]["trace_id"]
        assert mplp.replace("-", "")[:12] == TRACE_ID[:12]
        assert mplp.replace("-", "")[13:16] == TRACE_ID[13:16]
        assert mplp[14] == "4"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        otlp.shutdown()


def test_without_otel_variables_nothing_is_exported(tmp_path):
    """Tracing is off unless the standard variables ask for it: a gateway started with
    `OTEL_SDK_DISABLED=true` beside an endpoint exports nothing and still serves."""
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    with Receiver.lock:
        Receiver.spans.clear()
    os.environ["OTEL_SDK_DISABLED"] = "true"
    try:
        proc, url, log = serve(tmp_path, otlp.server_address[1])
    finally:
        del os.environ["OTEL_SDK_DISABLED"]
    try:
        status, _ = call(url, "POST", "/v1/tool-calls", AGENT_KEY,
                         {"agent": "ops_bot", "session_id": "s1", "tool": "status",
                          "arguments": {}}, {"traceparent": f"00-{TRACE_ID}-{AGENT_SPAN}-01"})
        assert status == 200
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        otlp.shutdown()
    time.sleep(0.5)
    with Receiver.lock:
        assert Receiver.spans == []


def test_a_made_up_http_method_cannot_swell_the_exported_spans(tmp_path):
    """Attack (found by review): HTTP allows any token as a method, and a client with no key
    sent one of 20 KB; each such request exported a span named by it, as large, ahead of the
    approvals' spans. A method HTTP does not define is `_OTHER`, its span `HTTP {route}`,
    with at most 32 bytes of the original (OpenTelemetry HTTP semantic conventions). Nor can
    an approval id of 6 KB in the path."""
    import socket
    with Receiver.lock:
        Receiver.spans.clear()
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    proc, url, log = serve(tmp_path, otlp.server_address[1])
    try:
        port = int(url.rsplit(":", 1)[1])
        method = "A" * 20000
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"{method} /v1/whoami HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                      .encode())
            reply = s.recv(4096).decode(errors="replace")
        assert reply.startswith("HTTP/1.1 4"), reply[:200]
        # A standard method keeps its name.
        assert call(url, "GET", "/v1/whoami", AGENT_KEY)[0] == 200
        other = wait_for(lambda spans: [s for _, s in spans
                                        if attrs(s).get("http.request.method") == "_OTHER"],
                         "a span of the made-up method")
        assert other[0].name == "HTTP /v1/whoami", other[0].name
        assert attrs(other[0])["http.request.method_original"] == "A" * 32
        wait_for(lambda spans: [s for _, s in spans if s.name == "GET /v1/whoami"],
                 "the span of the standard request")
        # Found by review: an approval id in the path, unchecked, went into the wait's span
        # whole, so a loop of 6 KB ids crowded the export queue.
        assert call(url, "GET", "/v1/approvals/" + "a" * 6000, AGENT_KEY)[0] == 404
        wait_for(lambda spans: [s for _, s in spans if s.name == "GET /v1/approvals/{id}"],
                 "the span of the long id's request")
        with Receiver.lock:
            longest = max(len(s.name) for _, s in Receiver.spans)
            values = [len(str(v)) for _, s in Receiver.spans for v in attrs(s).values()]
        assert longest < 100 and max(values) < 1000, (longest, max(values))
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        otlp.shutdown()


# A raw stdio MCP upstream (2025-06-18 era) with one tool, `echo`; it appends the `_meta` of
# every tools/call it receives to the file META_LOG.
UPSTREAM = r"""
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "up", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": [{"name": "echo", "description": "Echo.",
                        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}
    elif m["method"] == "tools/call":
        with open(os.environ["META_LOG"], "a") as f:
            f.write(json.dumps(m["params"].get("_meta", {})) + "\n")
        r = {"content": [{"type": "text", "text": m["params"]["arguments"]["text"]}]}
    else:
        r = {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"""


def test_an_mcp_call_carries_its_trace_to_the_gateway_and_the_upstream(tmp_path):
    with Receiver.lock:
        Receiver.spans.clear()
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    proc, url, log = serve(tmp_path, otlp.server_address[1])
    meta_log = tmp_path / "meta.jsonl"
    (tmp_path / "upstream.py").write_text(UPSTREAM)
    env = dict(otel_env(otlp.server_address[1], "assent-mcp-e2e"), ASSENT_URL=url,
               ASSENT_API_KEY=AGENT_KEY, META_LOG=str(meta_log))
    relay = subprocess.Popen([ASSENT, "mcp", "--agent", "ops_bot", "--server", "up", "--session",
                              "mcp", "--", sys.executable, str(tmp_path / "upstream.py")],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    trace_id, client_span = os.urandom(16).hex(), os.urandom(8).hex()
    try:
        def send(m):
            relay.stdin.write(json.dumps(m) + "\n")
            relay.stdin.flush()

        def answer(id_):
            while True:
                m = json.loads(relay.stdout.readline())
                if m.get("id") == id_:
                    return m

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"}}})
        answer(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "traced"},
            "_meta": {"traceparent": f"00-{trace_id}-{client_span}-01"}}})
        r = answer(2)
        assert r["result"]["content"][0]["text"] == "traced", r
    finally:
        relay.stdin.close()
        relay.wait(15)
        proc.terminate()
        proc.wait(10)
        log.close()
    # The upstream got a traceparent in the same trace, whose parent is assent's span.
    got = json.loads(meta_log.read_text().splitlines()[0])["traceparent"].split("-")
    assert got[1] == trace_id and got[2] != client_span, got
    tid = bytes.fromhex(trace_id)
    call_span = wait_for(lambda ss: [s for svc, s in ss if s.name == "assent.mcp.call"
                                     and s.trace_id == tid
                                     and svc["service.name"] == "assent-mcp-e2e"],
                         "assent.mcp.call span from the proxy")[0]
    assert call_span.parent_span_id == bytes.fromhex(client_span)
    upstream = wait_for(lambda ss: [s for _, s in ss if s.name == "assent.upstream_call"
                                    and s.trace_id == tid], "assent.upstream_call span")[0]
    assert upstream.span_id == bytes.fromhex(got[2])
    assert upstream.parent_span_id == call_span.span_id
    # The gateway's side of the same call: its propose span is in the client's trace.
    propose = wait_for(lambda ss: [s for svc, s in ss if s.name == "assent.propose"
                                   and s.trace_id == tid
                                   and svc["service.name"] == "assent-e2e"],
                       "the gateway's assent.propose span")[0]
    assert attrs(propose)["assent.tool"] == "echo"
    assert attrs(propose)["assent.outcome"] == "allowed"
    otlp.shutdown()


def test_a_call_through_the_hub_carries_its_trace_to_the_upstream(tmp_path):
    """The same through `/mcp` on `assent serve` (the hub), with the MCP Python SDK's client
    sending `_meta.traceparent`."""
    import asyncio

    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with Receiver.lock:
        Receiver.spans.clear()
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    meta_log = tmp_path / "meta.jsonl"
    (tmp_path / "upstream.py").write_text(UPSTREAM)
    upstreams = (f'mcp_upstreams:\n  up: {{command: ["{sys.executable}", "{tmp_path / "upstream.py"}"], '
                 f'env: {{META_LOG: "{meta_log}"}}}}\n')
    proc, url, log = serve(tmp_path, otlp.server_address[1], upstreams)
    trace_id, client_span = os.urandom(16).hex(), os.urandom(8).hex()

    async def call():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT_KEY}"},
                                  timeout=httpx2.Timeout(30))
        async with streamable_http_client(url + "/mcp", http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool(
                    "up__echo", {"text": "via the hub"},
                    meta={"traceparent": f"00-{trace_id}-{client_span}-01"})

    try:
        result = asyncio.run(call())
        assert result.content[0].text == "via the hub", result
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    got = json.loads(meta_log.read_text().splitlines()[0])["traceparent"].split("-")
    assert got[1] == trace_id and got[2] != client_span, got
    tid = bytes.fromhex(trace_id)
    call_span = wait_for(lambda ss: [s for _, s in ss if s.name == "assent.mcp.call"
                                     and s.trace_id == tid], "the hub's assent.mcp.call span")[0]
    assert call_span.parent_span_id == bytes.fromhex(client_span)
    upstream = wait_for(lambda ss: [s for _, s in ss if s.name == "assent.upstream_call"
                                    and s.trace_id == tid], "assent.upstream_call span")[0]
    assert upstream.span_id == bytes.fromhex(got[2])
    wait_for(lambda ss: [s for _, s in ss if s.name == "assent.propose" and s.trace_id == tid
                         and attrs(s)["assent.tool"] == "echo"], "the propose span of the hub call")
    otlp.shutdown()
