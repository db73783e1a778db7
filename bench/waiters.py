#!/usr/bin/env python3
"""What open long-polls and SSE subscribers cost the gateway (issue 10 §13; BENCHMARKS.md
"Waiters").

  cargo build --release -p assent
  python3 bench/waiters.py [--seconds 10] [--waiters 3000] [--sse 500]
  ASSENT_BIN=/path/to/other/assent python3 bench/waiters.py     # e.g. an older build

Two parts, each against a fresh `assent serve` (temporary config and data dir, loopback only):

1. throughput: several clients send allowed `POST /v1/tool-calls` (a tool without approval;
   each is a committed `call.allowed` audit record) for a fixed time while another client
   decides other held approvals at a steady rate (so changes, and wake-ups, happen). Phases
   alternate: A (no long-poll open), B (N long-polls `GET /v1/approvals/{id}?wait=60` open on N
   held approvals, spread over several agent principals so none holds more than 1,024), A, B,
   ..., A. Each B is compared with the mean of the A phases on either side.
2. memory: the server's VmRSS (/proc/PID/status) before and after opening N requests of one
   kind, divided by N: idle keep-alive connections, waiting long-polls, `GET /aaep/v1/events`
   subscribers (operator key; each opens an AAEP subscription) and `GET /ui/events` subscribers
   (dashboard session), the SSE ones also after some changes were streamed. Nothing is closed
   between the steps, so none reuses heap an earlier one freed.

Python standard library only: asyncio with raw HTTP/1.1 over sockets, one connection per open
request, so the client itself is cheap. Bounded: every phase has a fixed duration or count, and
the whole run a time limit (--limit); the server is stopped at the end in every case.
"""

import argparse
import asyncio
import hashlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "release" / "assent"))
OP_KEY = "bench-operator-key"
AGENTS = 10  # agent principals sharing the agent id `bench`; long-polls are spread over them


def agent_key(i):
    return f"bench-agent-key-{i}"


def sha(k):
    return hashlib.sha256(k.encode()).hexdigest()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    """(VmRSS in KiB, threads) of process `pid`."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, port):
        self.port = port
        self.r = self.w = None

    async def open(self):
        self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    def send(self, method, path, key=None, body=None, headers=None):
        h = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        if key:
            h.append(f"Authorization: Bearer {key}")
        for k, v in (headers or {}).items():
            h.append(f"{k}: {v}")
        data = b""
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if not any(k.lower() == "content-type" for k in (headers or {})):
                h.append("Content-Type: application/json")
            h.append(f"Content-Length: {len(data)}")
        self.w.write(("\r\n".join(h) + "\r\n\r\n").encode() + data)

    async def head(self):
        """Status and headers (lower-case names; Set-Cookie values joined by newlines)."""
        raw = await self.r.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                k = k.strip().lower()
                hdrs[k] = (hdrs[k] + "\n" if k in hdrs else "") + v.strip()
        return status, hdrs

    async def chunk(self):
        """One chunk of a chunked body (b"" at its end)."""
        size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await self.r.readexactly(size + 2)
        return data[:-2]

    async def response(self):
        status, hdrs = await self.head()
        if "content-length" in hdrs:
            body = await self.r.readexactly(int(hdrs["content-length"]))
        elif hdrs.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while c := await self.chunk():
                body += c
            await self.r.readuntil(b"\r\n")
        else:
            body = b""
        return status, hdrs, body

    async def request(self, method, path, key=None, body=None, headers=None):
        self.send(method, path, key, body, headers)
        await self.w.drain()
        return await self.response()

    def close(self):
        if self.w:
            self.w.close()


async def propose(port, n, tool, session="s"):
    """Creates `n` calls of `tool` with distinct arguments; returns the approval ids (held)."""
    ids = []
    conns = [await Conn(port).open() for _ in range(4)]

    async def worker(c, k):
        for i in range(k, n, len(conns)):
            # A session of 100 calls at most: what is measured is waiting, not a long session.
            st, _, b = await c.request("POST", "/v1/tool-calls", agent_key(0),
                                       {"agent": "bench", "session_id": f"{session}{i // 100}", "tool": tool,
                                        "arguments": {"n": i, "s": session}})
            if st != 202:
                raise RuntimeError(f"held call: {st} {b[:300]!r}")
            ids.append(json.loads(b)["approval_id"])

    await asyncio.gather(*(worker(c, k) for k, c in enumerate(conns)))
    for c in conns:
        c.close()
    return ids


async def throughput(port, clients, seconds):
    """Allowed proposals per second from `clients` concurrent keep-alive connections."""
    stop = time.monotonic() + seconds
    counts = [0] * clients

    async def worker(k):
        c = await Conn(port).open()
        i = 0
        while time.monotonic() < stop:
            i += 1
            st, _, b = await c.request("POST", "/v1/tool-calls", agent_key(0),
                                       # A new session every 50 calls: each proposal reads its
                                       # session's earlier calls (thresholds), so one long
                                       # session would slow down as it grows.
                                       {"agent": "bench", "session_id": f"t{k}-{i // 50}", "tool": "noop",
                                        "arguments": {"c": k, "i": i}})
            if st != 200:
                raise RuntimeError(f"allowed call: {st} {b[:300]!r}")
            counts[k] += 1
        c.close()

    t0 = time.monotonic()
    await asyncio.gather(*(worker(k) for k in range(clients)))
    return sum(counts) / (time.monotonic() - t0)


class Decider:
    """Decides approvals from `pool` at `rate` per second (each decision is a change)."""

    def __init__(self, port, pool, rate):
        self.port, self.pool, self.rate, self.done = port, pool, rate, 0
        self.task = None

    async def run(self):
        c = await Conn(self.port).open()
        try:
            while self.pool:
                t = time.monotonic()
                st, _, b = await c.request("POST", f"/v1/approvals/{self.pool.pop()}/decision", OP_KEY,
                                           {"decision": "approve"})
                if st != 200:
                    raise RuntimeError(f"decision: {st} {b[:300]!r}")
                self.done += 1
                await asyncio.sleep(max(0.0, 1 / self.rate - (time.monotonic() - t)))
        finally:
            c.close()

    def start(self):
        self.task = asyncio.create_task(self.run())

    async def stop(self):
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


class LongPolls:
    """One long-poll per approval, each on its own connection, re-issued when it returns."""

    def __init__(self, port, ids):
        self.port, self.ids, self.returned, self.sent = port, ids, 0, 0
        self.tasks = []
        self.opened = 0

    async def one(self, k, aid):
        c = await Conn(self.port).open()
        try:
            while True:
                c.send("GET", f"/v1/approvals/{aid}?wait=60", agent_key(k % AGENTS))
                self.sent += 1
                st, _, b = await c.response()
                if st != 200:
                    raise RuntimeError(f"long-poll: {st} {b[:300]!r}")
                self.returned += 1
        finally:
            c.close()

    async def open(self, n):
        """Opens the next `n` long-polls."""
        start, self.opened = self.opened, min(len(self.ids), self.opened + n)
        for k in range(start, self.opened):
            self.tasks.append(asyncio.create_task(self.one(k, self.ids[k])))
            if k % 100 == 99:
                await asyncio.sleep(0.05)  # do not flood the accept queue
        while self.sent < self.opened:
            await asyncio.sleep(0.1)
            for t in self.tasks:
                if t.done() and t.exception():
                    raise t.exception()

    async def close(self):
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class Streams:
    """`n` SSE subscribers on `path`, each read continuously."""

    def __init__(self, port, path, n, key=None, cookie=None):
        self.port, self.path, self.n, self.key, self.cookie = port, path, n, key, cookie
        self.tasks, self.open_count, self.chunks = [], 0, 0

    async def one(self):
        c = await Conn(self.port).open()
        try:
            c.send("GET", self.path, self.key, headers={"Accept": "text/event-stream",
                                                         **({"Cookie": self.cookie} if self.cookie else {})})
            st, h = await c.head()
            if st != 200 or not h.get("content-type", "").startswith("text/event-stream"):
                raise RuntimeError(f"SSE {self.path}: {st} {h}")
            self.open_count += 1
            while await c.chunk():
                self.chunks += 1
        finally:
            c.close()

    async def open(self):
        for k in range(self.n):
            self.tasks.append(asyncio.create_task(self.one()))
            if k % 50 == 49:
                await asyncio.sleep(0.05)
        deadline = time.monotonic() + 60
        while self.open_count < self.n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.open_count} of {self.n} streams of {self.path} opened")
            for t in self.tasks:
                if t.done() and t.exception():
                    raise t.exception()
            await asyncio.sleep(0.1)

    async def close(self):
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def settle(pid, seconds=2.0):
    await asyncio.sleep(seconds)
    return proc_status(pid)


async def dashboard_cookie(port):
    c = await Conn(port).open()
    st, h, _ = await c.request("GET", "/ui/login")
    login = [x.split(";")[0] for x in h.get("set-cookie", "").split("\n") if x.startswith("assent_ui_login=")][0]
    csrf = login.split("=", 1)[1]
    form = f"key={OP_KEY}&csrf={csrf}&next=%2Fui".encode()
    st, h, _ = await c.request("POST", "/ui/login", body=form,
                               headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": login})
    c.close()
    session = [x.split(";")[0] for x in h.get("set-cookie", "").split("\n") if x.startswith("assent_ui=")]
    if not session:
        raise RuntimeError(f"dashboard sign-in: {st} {h}")
    return session[0]


async def memory(a, port, pid):
    """Server KiB per open request of each kind. Nothing is closed between the steps, so no
    step can reuse heap an earlier one freed: each delta is on top of everything before it."""
    waiters = await propose(port, a.waiters, "held", "w")
    pool = await propose(port, 200, "held", "d")
    await throughput(port, a.clients, 2)  # warm-up: the heap, the blocking pool
    out, keep = {}, []

    async def step(name, n, opened, changes=0):
        r0, t0 = await settle(pid)
        keep.append(await opened())
        r1, t1 = await settle(pid, 3.0)
        out[name] = (r1 - r0) / n
        line = f"{name}: {n} open: RSS {r0} -> {r1} KiB, {out[name]:.2f} KiB each; threads {t0} -> {t1}"
        if changes:
            d = Decider(port, pool, 10)
            d.start()
            await asyncio.sleep(changes / 10)
            await d.stop()
            r2, t2 = await settle(pid, 3.0)
            out[name + " after changes"] = (r2 - r0) / n
            line += f"; after {changes} decisions {(r2 - r0) / n:.2f} KiB each, threads {t2}"
        print(line, flush=True)

    async def idle():
        conns = []
        for _ in range(a.idle):
            c = await Conn(port).open()
            st, _, _ = await c.request("GET", "/healthz")
            if st != 200:
                raise RuntimeError(f"healthz: {st}")
            conns.append(c)
        return conns

    async def polls():
        lp = LongPolls(port, waiters)
        await lp.open(len(waiters))
        return lp

    async def streams(path, **kw):
        st = Streams(port, path, a.sse, **kw)
        await st.open()
        return st

    if a.idle:
        await step("idle keep-alive connection (one /healthz served)", a.idle, idle)
    await step("waiting long-poll", a.waiters, polls)
    if a.sse:
        await step("AAEP SSE subscriber", a.sse, lambda: streams("/aaep/v1/events", key=OP_KEY), changes=20)
        cookie = await dashboard_cookie(port)
        await step("dashboard SSE subscriber", a.sse, lambda: streams("/ui/events", cookie=cookie), changes=20)
    for k in keep:
        if isinstance(k, list):
            for c in k:
                c.close()
        else:
            await k.close()
    return out


async def speed(a, port, pid):
    """Proposals per second without and with `a.waiters` long-polls open."""
    waiters = await propose(port, a.waiters, "held", "w")
    pool = await propose(port, int(a.rate * a.seconds * (2 * a.rounds + 1) + 50), "held", "d")
    print(f"held approvals: {len(waiters)} to wait on, {len(pool)} to decide", flush=True)
    await throughput(port, a.clients, 2)  # warm-up

    async def phase(label):
        d = Decider(port, pool, a.rate)
        d.start()
        x = await throughput(port, a.clients, a.seconds)
        await d.stop()
        r, t = proc_status(pid)
        print(f"{label}: {x:.1f} proposals/s (RSS {r} KiB, threads {t})", flush=True)
        return x

    # Phases alternate (A, B, A, B, …, A) so a load change on a shared machine moves both.
    without, with_ = [await phase("A  no long-poll open")], []
    for _ in range(a.rounds):
        lp = LongPolls(port, waiters)
        await lp.open(len(waiters))
        await asyncio.sleep(2)
        early = lp.returned
        with_.append(await phase(f"B  {len(waiters)} long-polls open"))
        if lp.returned != early:
            print(f"   ({lp.returned - early} long-polls returned during the phase)")
        await lp.close()
        await asyncio.sleep(2)
        without.append(await phase("A  no long-poll open"))
    mean = lambda xs: sum(xs) / len(xs)
    ratio = mean(with_) / mean(without)
    pairs = [w / ((without[i] + without[i + 1]) / 2) for i, w in enumerate(with_)]
    print(f"ratio with/without long-polls: {ratio:.3f} (each B against its neighbours: "
          f"{', '.join(f'{x:.2f}' for x in pairs)}; acceptance: >= 0.5)", flush=True)
    return {"without": without, "with": with_, "ratio": ratio, "pairs": pairs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10, help="length of each throughput phase")
    ap.add_argument("--clients", type=int, default=8, help="concurrent proposing connections")
    ap.add_argument("--waiters", type=int, default=3000, help=f"long-polls to hold open (<= {AGENTS} * 1024)")
    ap.add_argument("--idle", type=int, help="idle keep-alive connections measured first (default: --waiters)")
    ap.add_argument("--rate", type=float, default=10, help="decisions per second during throughput phases")
    ap.add_argument("--sse", type=int, default=500, help="SSE subscribers per stream (0: skip)")
    ap.add_argument("--rounds", type=int, default=2, help="with-waiters phases (each between two without)")
    ap.add_argument("--only", choices=["memory", "speed"], help="run one part only")
    ap.add_argument("--limit", type=float, default=600, help="the whole run's time limit, seconds")
    a = ap.parse_args()
    if a.waiters > AGENTS * 1024:
        sys.exit(f"--waiters at most {AGENTS * 1024} (1,024 per agent principal)")
    if not Path(ASSENT).exists():
        sys.exit("build assent first: cargo build --release -p assent")
    # Every open request is a socket here and one in the server (which inherits this limit);
    # each process has its own count.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    a.idle = a.waiters if a.idle is None else a.idle
    need = a.waiters + a.idle + 2 * a.sse + 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < need:
        sys.exit(f"the open-file limit is {hard}; this run needs about {need}")
    results = {}
    deadline = time.monotonic() + a.limit
    if a.only in (None, "memory"):
        print("-- memory (fresh server)", flush=True)
        results["kib_each"] = with_server(a, lambda port, pid: memory(a, port, pid), deadline)
    if a.only in (None, "speed"):
        print("-- throughput (fresh server)", flush=True)
        results["proposals_per_s"] = with_server(a, lambda port, pid: speed(a, port, pid), deadline)
    print(json.dumps(results))


def with_server(a, body, deadline):
    """Runs `body(port, pid)` against a fresh `assent serve` in a temporary directory."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "a.agf.yaml").write_text(
            'schema_version: "1.0.0"\nmetadata: {id: bench, name: Bench, version: 1.0.0, description: bench}\n'
            "action_space:\n  local_tools:\n    - alias: noop\n"
            "    - alias: held\n      approval: {message_template: \"held {{tool_args.n}}\"}\n")
        port = free_port()
        principals = [f"  - {{name: op, kind: operator, roles: [ops], key_sha256: \"{sha(OP_KEY)}\"}}"]
        principals += [f"  - {{name: agent{i}, kind: agent, agent_id: bench, key_sha256: \"{sha(agent_key(i))}\"}}"
                       for i in range(AGENTS)]
        (d / "assent.yaml").write_text(
            f"listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [a.agf.yaml]\n"
            "approval_timeout_seconds: 3600\nmax_pending_per_agent: 100000\n"
            # What is measured is the gateway, not its per-principal limiter or connection cap.
            "rate_limits: {requests_per_second: 1000000, burst: 1000000}\nmax_connections: 30000\nmax_connections_per_address: 30000\n"
            "principals:\n" + "\n".join(principals) + "\n")
        log = open(d / "serve.log", "w")
        serve = subprocess.Popen([ASSENT, "serve", "--config", str(d / "assent.yaml")],
                                 stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG="warn"))
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if serve.poll() is not None:
                        break
                    time.sleep(0.1)
            if serve.poll() is not None:
                log.flush()
                sys.exit("assent serve did not start:\n" + (d / "serve.log").read_text()[-2000:])
            print(f"assent: {ASSENT} (pid {serve.pid})", flush=True)
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit("out of time (--limit)")
            return asyncio.run(asyncio.wait_for(body(port, serve.pid), left))
        finally:
            serve.terminate()
            try:
                serve.wait(10)
            except subprocess.TimeoutExpired:
                serve.kill()
            log.close()


if __name__ == "__main__":
    main()
