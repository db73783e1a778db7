#!/usr/bin/env python3
"""Added latency of `assent mcp` for an allowed tools/call, against calling the same upstream
directly, in the same run (BENCHMARKS.md "MCP proxy").

  cargo build --release -p assent
  (cd tests/e2e && npm ci)              # the upstream: @modelcontextprotocol/server-everything
  python3 bench/mcp_proxy.py [--calls 500]

A raw JSON-RPC client over stdio (no SDK, so the client's own cost is the same small constant
on both paths) sends `tools/call echo` one at a time and times each round trip: first straight
to `node server-everything stdio`, then through `assent mcp` in front of the same server, with
`assent serve` (SQLite, synchronous=FULL) deciding each call: the gateway's allow verdict is a
committed audit record before the call is forwarded, and the result's hash is recorded after.
"""

import argparse
import http.client
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "release" / "assent"))
EVERYTHING = ROOT / "tests" / "e2e" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
AGENT_KEY = "bench-agent-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stdio:
    def __init__(self, cmd, env):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env=env, text=True, bufsize=1)
        self.next_id = 0

    def request(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            m = json.loads(line)
            if m.get("id") == self.next_id:
                return m

    def notify(self, method):
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.p.stdin.flush()

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


class Http:
    """A raw streamable HTTP MCP client on one keep-alive connection."""

    def __init__(self, port, path, key=None):
        self.c = http.client.HTTPConnection("127.0.0.1", port)
        self.path, self.key, self.session, self.next_id = path, key, None, 0

    def _post(self, msg):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": "2025-06-18"}
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        if self.session:
            h["Mcp-Session-Id"] = self.session
        self.c.request("POST", self.path, body=json.dumps(msg), headers=h)
        r = self.c.getresponse()
        self.session = r.getheader("Mcp-Session-Id") or self.session
        body = r.read().decode()
        if r.status >= 300:
            raise RuntimeError(f"{r.status}: {body}")
        if r.getheader("Content-Type", "").startswith("text/event-stream"):
            for line in body.splitlines():
                if line.startswith("data:") and line[5:].strip():
                    m = json.loads(line[5:])
                    if m.get("id") == msg.get("id"):
                        return m
            return None
        return json.loads(body) if body else None

    def request(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        return self._post(msg)

    def notify(self, method):
        self._post({"jsonrpc": "2.0", "method": method})

    def close(self):
        self.c.close()


def run_calls(s, tool, calls, warmup):
    s.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "bench", "version": "1"}})
    s.notify("notifications/initialized")
    s.request("tools/list")
    times = []
    for i in range(warmup + calls):
        t0 = time.perf_counter()
        r = s.request("tools/call", {"name": tool, "arguments": {"message": f"m{i}"}})
        dt = time.perf_counter() - t0
        assert r["result"]["content"][0]["text"] == f"Echo: m{i}", r
        if i >= warmup:
            times.append(dt * 1000)
    s.close()
    return times


def measure(cmd, env, calls, warmup):
    s = Stdio(cmd, env)
    s.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "bench", "version": "1"}})
    s.notify("notifications/initialized")
    s.request("tools/list")
    times = []
    for i in range(warmup + calls):
        t0 = time.perf_counter()
        r = s.request("tools/call", {"name": "echo", "arguments": {"message": f"m{i}"}})
        dt = time.perf_counter() - t0
        text = r["result"]["content"][0]["text"]
        assert text == f"Echo: m{i}", r
        if i >= warmup:
            times.append(dt * 1000)
    s.close()
    return times


def summary(ts):
    ts = sorted(ts)
    q = lambda p: ts[min(len(ts) - 1, int(p * len(ts)))]
    return {"median": statistics.median(ts), "p90": q(0.90), "p99": q(0.99)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    a = ap.parse_args()
    if not Path(ASSENT).exists() or not EVERYTHING.exists():
        sys.exit("build assent (cargo build --release -p assent) and run `npm ci` in tests/e2e first")
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "a.agf.yaml").write_text("metadata: {id: bench}\naction_space:\n  mcp_servers:\n    - alias: everything\n      allowed_tools: [echo]\n")
        port = free_port()
        (d / "assent.yaml").write_text(
            f"mcp_upstreams:\n  everything: {{command: [node, \"{EVERYTHING}\", stdio]}}\n"
            f"listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [a.agf.yaml]\nprincipals:\n"
            f"  - {{name: bench, kind: agent, agent_id: bench, key_sha256: \"{hashlib.sha256(AGENT_KEY.encode()).hexdigest()}\"}}\n")
        serve = subprocess.Popen([ASSENT, "serve", "--config", str(d / "assent.yaml")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    urllib.request.urlopen(url + "/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            upstream = ["node", str(EVERYTHING), "stdio"]
            env = dict(os.environ, ASSENT_URL=url, ASSENT_API_KEY=AGENT_KEY)
            direct = measure(upstream, env, a.calls, a.warmup)
            proxied = measure([ASSENT, "mcp", "--agent", "bench", "--server", "everything", "--", *upstream],
                              env, a.calls, a.warmup)
            # Streamable HTTP: server-everything serving HTTP itself, against the hub's /mcp.
            hport = free_port()
            node = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env=dict(os.environ, PORT=str(hport)),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                for _ in range(100):
                    try:
                        socket.create_connection(("127.0.0.1", hport), timeout=0.2).close()
                        break
                    except OSError:
                        time.sleep(0.1)
                http_direct = run_calls(Http(hport, "/mcp"), "echo", a.calls, a.warmup)
            finally:
                node.terminate()
                node.wait(10)
            http_hub = run_calls(Http(port, "/mcp", AGENT_KEY), "everything__echo", a.calls, a.warmup)
        finally:
            serve.terminate()
            serve.wait(10)
    print(f"{a.calls} sequential tools/call echo (after {a.warmup} warm-up), milliseconds")
    print(f"{'':34}{'median':>10}{'p90':>10}{'p99':>10}{'ratio':>10}")
    for name, ts, base in [("stdio: direct to upstream", direct, direct),
                           ("stdio: through assent mcp", proxied, direct),
                           ("HTTP: direct to upstream", http_direct, http_direct),
                           ("HTTP: through assent /mcp", http_hub, http_direct)]:
        s, b = summary(ts), summary(base)
        print(f"{name:34}{s['median']:10.3f}{s['p90']:10.3f}{s['p99']:10.3f}{s['median'] / b['median']:9.2f}x")


if __name__ == "__main__":
    main()
