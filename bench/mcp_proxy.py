#!/usr/bin/env python3
"""Added latency of `assent mcp` for an allowed tools/call, against calling the same upstream
directly, in the same run (BENCHMARKS.md "MCP proxy").

  cargo build --release -p assent
  (cd tests/e2e && npm ci)              # the upstream: @modelcontextprotocol/server-everything
  python3 bench/mcp_proxy.py [--calls 500] [--clients 1,8]

A raw JSON-RPC client (no SDK, so the client's own cost is the same small constant on both
paths) sends `tools/call echo` and times each round trip, with 1 and with 8 concurrent clients
(issue 13 item 6, B2):

- stdio: straight to `node server-everything stdio`, then through `assent mcp` in front of the
  same server. N clients share the one process: N threads each keep one call in flight on the
  same pipe, JSON-RPC ids interleaved (a reader thread hands each answer to its caller);
- streamable HTTP: straight to `node server-everything streamableHttp`, then through the hub at
  `/mcp` on `assent serve`: N threads, each with its own keep-alive connection and MCP session.

`assent serve` (SQLite, synchronous=FULL) decides each call: the gateway's allow verdict is a
committed audit record before the call is forwarded, and the result's hash is recorded after.
`--calls` is the number of timed calls per cell (split over its clients), after `--warmup`.
`ASSENT_BIN` and `EVERYTHING_JS` override where the binary and the upstream are.
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
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "release" / "assent"))
EVERYTHING = Path(os.environ.get("EVERYTHING_JS", "")) if os.environ.get("EVERYTHING_JS") else ROOT / "tests" / "e2e" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
AGENT_KEY = "bench-agent-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stdio:
    """One MCP server process over stdio, shared by any number of threads: each request gets its
    own JSON-RPC id, and a reader thread hands each answer to the thread waiting for it."""

    def __init__(self, cmd, env):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env=env, text=True, bufsize=1)
        self.next_id = 0
        self.lock = threading.Lock()
        self.pending = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                slot = self.pending.pop(m.get("id"), None) if "id" in m and "method" not in m else None
            if slot:
                slot[1] = m
                slot[0].set()
        with self.lock:
            for slot in self.pending.values():
                slot[0].set()

    def request(self, method, params=None):
        slot = [threading.Event(), None]
        with self.lock:
            self.next_id += 1
            msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
            if params is not None:
                msg["params"] = params
            self.pending[self.next_id] = slot
            self.p.stdin.write(json.dumps(msg) + "\n")
            self.p.stdin.flush()
        if not slot[0].wait(60) or slot[1] is None:
            raise RuntimeError("no answer (the server closed its output or hung)")
        return slot[1]

    def notify(self, method):
        with self.lock:
            self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
            self.p.stdin.flush()

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


class Http:
    """A raw streamable HTTP MCP client on one keep-alive connection (one per thread)."""

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


def handshake(s):
    s.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "bench", "version": "1"}})
    s.notify("notifications/initialized")
    s.request("tools/list")


def calls_on(s, tool, k, calls, warmup, start, out, errors):
    """Client `k`: `warmup` untimed then `calls` timed `tools/call` on `s`, after `start`; an
    error (a refused or wrong answer) goes to `errors`, which fails the run."""
    start.wait()
    try:
        for i in range(warmup + calls):
            t0 = time.perf_counter()
            r = s.request("tools/call", {"name": tool, "arguments": {"message": f"c{k}m{i}"}})
            dt = time.perf_counter() - t0
            assert r["result"]["content"][0]["text"] == f"Echo: c{k}m{i}", r
            if i >= warmup:
                out.append(dt * 1000)
    except Exception as e:  # noqa: BLE001 - reported below, the run fails
        errors.append(e)


def cpu_seconds(pids):
    """User + system CPU seconds used so far by the processes `pids` (/proc/PID/stat)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def concurrently(sessions, tool, calls, warmup, pids=()):
    """Runs one client thread per session at once, `calls` timed calls in all. Returns every
    time (ms) and the CPU the processes `pids` used per call (ms, warm-up calls included)."""
    n = len(sessions)
    per, warm, start, out, errors = max(1, calls // n), max(1, warmup // n), threading.Event(), [], []
    ts = [threading.Thread(target=calls_on, args=(s, tool, k, per, warm, start, out, errors))
          for k, s in enumerate(sessions)]
    for t in ts:
        t.start()
    cpu0 = cpu_seconds(pids)
    start.set()
    for t in ts:
        t.join()
    cpu = (cpu_seconds(pids) - cpu0) * 1000 / (n * (per + warm))
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}")
    return out, cpu


def stdio_cell(cmd, env, clients, calls, warmup, pids=()):
    """`clients` threads on one stdio process (ids interleaved on its pipe); the CPU of that
    process and of `pids` is measured."""
    s = Stdio(cmd, env)
    handshake(s)
    try:
        return concurrently([s] * clients, "echo", calls, warmup, [s.p.pid, *pids])
    finally:
        s.close()


def http_cell(port, path, key, tool, clients, calls, warmup, pids=()):
    """`clients` threads, each on its own connection and MCP session; the CPU of `pids`."""
    sessions = [Http(port, path, key) for _ in range(clients)]
    for s in sessions:
        handshake(s)
    try:
        return concurrently(sessions, tool, calls, warmup, pids)
    finally:
        for s in sessions:
            s.close()


def summary(ts):
    ts = sorted(ts)
    q = lambda p: ts[min(len(ts) - 1, int(p * len(ts)))]
    return {"median": statistics.median(ts), "p90": q(0.90), "p99": q(0.99)}


def wait_port(port):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--clients", default="1,8", help="comma-separated concurrency levels")
    ap.add_argument("--transports", default="stdio,http", help="comma-separated: stdio, http")
    a = ap.parse_args()
    transports = a.transports.split(",")
    levels = [int(x) for x in a.clients.split(",")]
    if not Path(ASSENT).exists() or not EVERYTHING.exists():
        sys.exit("build assent (cargo build --release -p assent) and run `npm ci` in tests/e2e first")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "a.agf.yaml").write_text("metadata: {id: bench}\naction_space:\n  mcp_servers:\n    - alias: everything\n      allowed_tools: [echo]\n")
        port = free_port()
        (d / "assent.yaml").write_text(
            f"mcp_upstreams:\n  everything: {{command: [node, \"{EVERYTHING}\", stdio]}}\n"
            f"listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [a.agf.yaml]\n"
            "rate_limits: {requests_per_second: 1000000, burst: 1000000}\nprincipals:\n"
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
            proxy = [ASSENT, "mcp", "--agent", "bench", "--server", "everything", "--", *upstream]
            for n in levels if "stdio" in transports else []:
                direct, _ = stdio_cell(upstream, env, n, a.calls, a.warmup)
                rows.append(("stdio", n, "direct to upstream", direct, direct, None))
                # CPU: the `assent mcp` process and `assent serve` (not the upstream's node).
                proxied, cpu = stdio_cell(proxy, env, n, a.calls, a.warmup, [serve.pid])
                rows.append(("stdio", n, "through assent mcp", proxied, direct, cpu))
            # Streamable HTTP: server-everything serving HTTP itself, against the hub's /mcp.
            if "http" not in transports:
                return print_rows(rows, a)
            hport = free_port()
            node = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env=dict(os.environ, PORT=str(hport)),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_port(hport)
                directs = {n: http_cell(hport, "/mcp", None, "echo", n, a.calls, a.warmup)[0] for n in levels}
            finally:
                node.terminate()
                node.wait(10)
            for n in levels:
                rows.append(("HTTP", n, "direct to upstream", directs[n], directs[n], None))
                # CPU: `assent serve` with its upstream (its node child is not counted).
                hub, cpu = http_cell(port, "/mcp", AGENT_KEY, "everything__echo", n, a.calls, a.warmup, [serve.pid])
                rows.append(("HTTP", n, "through assent /mcp", hub, directs[n], cpu))
        finally:
            serve.terminate()
            serve.wait(10)
    print_rows(rows, a)


def print_rows(rows, a):
    """Prints the table of `rows` (transport, clients, path, times, direct times, CPU)."""
    print(f"tools/call echo, {a.calls} timed calls per row (after {a.warmup} warm-up), milliseconds")
    print("(added: median minus the direct median; assent CPU: user+system ms per call of `assent serve`,")
    print(" plus the `assent mcp` process over stdio, warm-up calls included)")
    print(f"{'':6}{'clients':>8}  {'path':24}{'median':>9}{'p90':>9}{'p99':>9}{'ratio':>8}{'added':>9}{'assent CPU':>12}")
    for transport, n, name, ts, base, cpu in rows:
        s, b = summary(ts), summary(base)
        print(f"{transport:6}{n:8}  {name:24}{s['median']:9.3f}{s['p90']:9.3f}{s['p99']:9.3f}"
              f"{s['median'] / b['median']:7.2f}x{s['median'] - b['median']:+9.3f}"
              + (f"{cpu:12.3f}" if cpu is not None else ""))


if __name__ == "__main__":
    main()
