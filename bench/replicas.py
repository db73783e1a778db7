#!/usr/bin/env python3
"""B3 over HTTP (issue 13): durable decisions per second and decision-to-wake-up latency with
1, 16 and 64 agents, on SQLite (one gateway) and on PostgreSQL with one and two replicas.

  cargo build --release -p assent
  python3 bench/replicas.py [--seconds 8] [--agents 1,16,64] [--modes sqlite,pg1,pg2] [--no-ceiling] [--client rust|python]

Each agent runs cycles: propose a call that must be approved (`POST /v1/tool-calls` on its
replica), long-poll it (`GET /v1/approvals/{id}?wait=30`, same replica), while its operator
decides it (`POST /v1/approvals/{id}/decision`) on the *other* replica when there are two. A
cycle is two durable writes (the held call, the decision). Reported: cycles (decisions) per
second, and the time from the decision being sent to the agent's long-poll returning, p50 and
p99. PostgreSQL is a throw-away cluster made with initdb/pg_ctl in a temporary directory
(Debian's `postgresql` package; run as the `postgres` user when this runs as root), default
settings (fsync on, synchronous_commit on). The load is `benches/load.rs` (one tokio thread,
one keep-alive connection per agent and per operator; both instants of a latency taken in one
process); `--client python` drives the cells with Python threads instead (http.client; their
interpreter lock switches every 5 ms, which the latency then includes). Bounded: every cell
runs a fixed time; every server and the cluster are stopped at the end in every case.
`ASSENT_STORE_EXECUTOR=off` in the environment runs SQLite's store calls on the blocking pool
(before/after comparisons of the store executor).

Also per row: the gateways' own CPU per cycle (user + system time of the `assent serve`
processes over the cell, from /proc, divided by the cycles; PostgreSQL's own processes are not
counted), the bytes they had written to storage per cycle (`write_bytes` of /proc/PID/io: the
WAL frames of their commits and the checkpoints' pages), and the ratio to the bare-write ceiling measured in the same run: first, this runs
`cargo bench -p assent-bench --bench ceiling` (crates/assent-bench/benches/ceiling.rs: the same
two writes per cycle with rusqlite and ideal group commit, at the same numbers of agents;
`CEILING_BIN` and `LOAD_BIN` run prebuilt binaries instead of building them). `--redeem`: each
cycle also redeems its token (four requests; the ceiling still makes the two writes only, so
the ratio then understates), `ASSENT_BIN` runs another `assent` build.

The latency ceiling (issue 13 §4): the same program reports, per number of agents, the time
from a decision group's start to its `COMMIT` returning and to a thread waiting on a channel
receiving its wake (p50 and p99); each row shows the ceiling's wake p50/p99 beside the
gateway's and the gateway's as a multiple of it (`wake ×ceil`), and the decision request's own
round trip (`decide p50/p99`, from `load.rs`). `ASSENT_LATENCY_LOG=FILE` in the environment
makes the gateway log each store batch's and woken long-poll's times to FILE
(`crates/assent-server/src/executor.rs`, `probe`).
"""

import argparse
import glob
import hashlib
import http.client
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "release" / "assent"))
OP_KEY = "bench-operator-key-0123456789abcdef"


def sha(k):
    return hashlib.sha256(k.encode()).hexdigest()


def agent_key(i):
    return f"bench-agent-key-{i:03}-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A throw-away PostgreSQL cluster on a Unix socket in a temporary directory."""

    def __init__(self):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            sys.exit("no /usr/lib/postgresql/*/bin: install the postgresql package")
        self.bin = bins[-1]
        self.dir = tempfile.mkdtemp(prefix="assent-bench-pg-")
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        data = os.path.join(self.dir, "data")
        self.run(["initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8"])
        opts = f"-k {self.dir} -p {self.port} -c listen_addresses='' -c max_connections=300"
        self.run(["pg_ctl", "-D", data, "-o", opts, "-w", "-l", os.path.join(self.dir, "log"), "start"])
        self.data = data
        self.schemas = 0

    def run(self, cmd):
        cmd = [os.path.join(self.bin, cmd[0])] + cmd[1:]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def fresh_url(self):
        self.schemas += 1
        name = f"b{self.schemas}"
        psql = [os.path.join(self.bin, "psql"), "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                "-d", "postgres", "-qc", f"CREATE SCHEMA {name}"]
        subprocess.run(psql, check=True, stdout=subprocess.DEVNULL)
        return (f"postgresql://postgres@/postgres?host={self.dir}&port={self.port}"
                f"&options=-c%20search_path%3D{name}")

    def stop(self):
        try:
            self.run(["pg_ctl", "-D", self.data, "-m", "immediate", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def write_config(d, agents, url):
    Path(d, "bench.agf.yaml").write_text(
        'schema_version: "1.0.0"\nmetadata: {id: bench, name: Bench, version: 1.0.0, description: B3.}\n'
        "constraints:\n  governance_policies:\n    - policy_ref: bench.b3-v1\n"
        "action_space:\n  local_tools:\n    - alias: pay\n")
    Path(d, "policy.yaml").write_text(
        "policies:\n  - id: bench.b3-v1\n    description: B3.\n    rules:\n"
        "      - {tool: pay, risk_tier: R3, timeout_seconds: 300, default_decision: reject, approvers: [finance-admin]}\n")
    principals = [f"  - {{name: op, kind: operator, roles: [finance-admin], key_sha256: \"{sha(OP_KEY)}\"}}"]
    principals += [f"  - {{name: a{i}, kind: agent, agent_id: bench, key_sha256: \"{sha(agent_key(i))}\"}}"
                   for i in range(agents)]
    db = "database: {url_env: ASSENT_DATABASE_URL}\nkeys_dir: keys\n" if url else ""
    cfg = (f"listen: 127.0.0.1:0\ndata_dir: data\n{db}agents: [bench.agf.yaml]\ngovernance: [policy.yaml]\n"
           "max_pending_per_agent: 10000\nrate_limits: {requests_per_second: 1000000, burst: 1000000}\n"
           "principals:\n" + "\n".join(principals) + "\n")
    p = Path(d, "assent.yaml")
    p.write_text(cfg)
    return p


def start(cfg, url):
    port = free_port()
    env = dict(os.environ)
    if url:
        env["ASSENT_DATABASE_URL"] = url
    proc = subprocess.Popen([ASSENT, "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("a gateway did not start")


def call(conn, method, path, key, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"authorization": f"Bearer {key}"}
    if data is not None:
        headers["content-type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null")


def cell(ports, agents, seconds):
    """Runs `agents` agent/operator pairs for `seconds`; (cycles, latencies in ms)."""
    stop = time.time() + seconds
    lat, counts, lock = [], [0], threading.Lock()

    def pair(i):
        mine, other = ports[i % len(ports)], ports[(i + 1) % len(ports)]
        agent = http.client.HTTPConnection("127.0.0.1", mine, timeout=60)
        ids, sent = queue.Queue(), queue.Queue()

        def operator():
            op = http.client.HTTPConnection("127.0.0.1", other, timeout=60)
            while True:
                aid = ids.get()
                if aid is None:
                    return
                sent.put(time.perf_counter())
                call(op, "POST", f"/v1/approvals/{aid}/decision", OP_KEY, {"decision": "approve"})

        t = threading.Thread(target=operator, daemon=True)
        t.start()
        n = 0
        while time.time() < stop:
            n += 1
            s, v = call(agent, "POST", "/v1/tool-calls", agent_key(i),
                        {"agent": "bench", "session_id": f"s{i}-{n // 50}", "tool": "pay", "arguments": {"n": n}})
            if s != 202:
                raise SystemExit(f"propose answered {s}: {v}")
            aid = v["approval_id"]
            ids.put(aid)
            s, v = call(agent, "GET", f"/v1/approvals/{aid}?wait=30", agent_key(i))
            woke = time.perf_counter()
            if v.get("status") != "approved":
                raise SystemExit(f"long-poll answered {s}: {v}")
            with lock:
                counts[0] += 1
                lat.append((woke - sent.get()) * 1000)
        ids.put(None)
        t.join()

    threads = [threading.Thread(target=pair, args=(i,)) for i in range(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts[0], sorted(lat)


def bench_bin(name):
    """The path of bench `name` of assent-bench, built now if needed (release, bench profile)."""
    env = os.environ.get(f"{name.upper()}_BIN")
    if env:
        return env
    out = subprocess.run(["cargo", "bench", "-q", "-p", "assent-bench", "--bench", name, "--no-run",
                          "--message-format=json"], check=True, capture_output=True, text=True,
                         cwd=ROOT).stdout
    for line in out.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == name:
            return m["executable"]
    sys.exit(f"bench {name} was not built")


def rust_cell(ports, agents, seconds, redeem=False):
    """The same cell driven by `benches/load.rs` (one tokio thread); (cycles, p50, p99). With
    `redeem`, each cycle also redeems its token (the four-request cycle of issue 13 §4)."""
    cmd = [bench_bin("load"), "--ports", ",".join(str(p) for p in ports), "--agents", str(agents),
           "--seconds", str(seconds), "--op-key", OP_KEY] + (["--redeem"] if redeem else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=seconds + 120).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["cycles"], r["wake_p50_ms"], r["wake_p99_ms"], r


def cpu_seconds(pids):
    """User + system CPU seconds used so far by the processes `pids` (/proc/PID/stat)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def written_bytes(pids):
    """Bytes the processes `pids` have caused to be written to storage so far (/proc/PID/io
    `write_bytes`: the WAL frames of their commits and the checkpoints' pages)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/io") as f:
            total += int(next(l for l in f if l.startswith("write_bytes:")).split()[1])
    return total


def ceiling(agents):
    """The bare-write ceiling at each number of agents, measured now: {agents: its JSON row}
    (`cycles_per_s`, and `decide_p50_ms` … `wake_p99_ms` from a ceiling that reports them)."""
    args = ["--agents", ",".join(str(n) for n in agents)]
    out = subprocess.run([bench_bin("ceiling"), "--bench", *args], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    rows = json.loads(out.strip().splitlines()[-1])
    return {r["agents"]: r for r in rows}


def pct(xs, p):
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--agents", default="1,16,64")
    ap.add_argument("--modes", default="sqlite,pg1,pg2")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the bare-write ceiling")
    ap.add_argument("--client", default="rust", choices=["rust", "python"],
                    help="the load: benches/load.rs (default) or the Python threads of cell()")
    ap.add_argument("--redeem", action="store_true",
                    help="each cycle also redeems its token (Rust client only)")
    a = ap.parse_args()
    if a.redeem and a.client != "rust":
        sys.exit("--redeem needs --client rust")
    modes = a.modes.split(",")
    levels = [int(x) for x in a.agents.split(",")]
    ceil = {} if a.no_ceiling else ceiling(levels)
    nan = float("nan")
    for n in levels:
        if n in ceil:
            c = ceil[n]
            print(f"ceiling agents={n:3} cycles/s={c['cycles_per_s']:8.1f} decision group: COMMIT "
                  f"p50={c.get('decide_p50_ms', nan):.2f} p99={c.get('decide_p99_ms', nan):.2f} ms, wake "
                  f"p50={c.get('wake_p50_ms', nan):.2f} p99={c.get('wake_p99_ms', nan):.2f} ms "
                  "(bare rusqlite, ideal group commit)", flush=True)
    cluster = Cluster() if any(m.startswith("pg") for m in modes) else None
    rows = []
    try:
        for mode in modes:
            for n in levels:
                with tempfile.TemporaryDirectory() as d:
                    url = cluster.fresh_url() if mode.startswith("pg") else None
                    cfg = write_config(d, n, url)
                    if url:
                        subprocess.run([ASSENT, "keys", "init", "--config", str(cfg)], check=True,
                                       stdout=subprocess.DEVNULL)
                    procs = [start(cfg, url) for _ in range(2 if mode == "pg2" else 1)]
                    try:
                        pids = [p.pid for p, _ in procs]
                        cpu0, io0 = cpu_seconds(pids), written_bytes(pids)
                        ports = [p for _, p in procs]
                        extra = {}
                        if a.client == "rust":
                            cycles, p50, p99, extra = rust_cell(ports, n, a.seconds, a.redeem)
                        else:
                            cycles, lat = cell(ports, n, a.seconds)
                            p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
                        cpu = cpu_seconds(pids) - cpu0
                        io = written_bytes(pids) - io0
                    finally:
                        for p, _ in procs:
                            p.terminate()
                            p.wait(timeout=30)
                rate = cycles / a.seconds
                cpu_ms = cpu * 1000 / cycles if cycles else float("nan")
                kib = io / 1024 / cycles if cycles else float("nan")
                c = ceil.get(n, {})
                ratio = rate / c["cycles_per_s"] if c else nan
                cw50, cw99 = c.get("wake_p50_ms", nan), c.get("wake_p99_ms", nan)
                d50, d99 = extra.get("decide_p50_ms", nan), extra.get("decide_p99_ms", nan)
                rows.append((mode, n, rate, p50, p99, cpu_ms, ratio, kib, cw50, cw99, p50 / cw50,
                             p99 / cw99, d50, d99))
                print(f"{mode:6} agents={n:3} decisions/s={rate:8.1f} wake p50={p50:7.2f} ms "
                      f"p99={p99:7.2f} ms server CPU/cycle={cpu_ms:6.2f} ms "
                      f"/ceiling={ratio:6.3f} written/cycle={kib:6.1f} KiB "
                      f"ceiling wake p50/p99={cw50:.2f}/{cw99:.2f} ms wake ×ceil p50/p99="
                      f"{p50 / cw50:.1f}/{p99 / cw99:.1f} decide p50/p99={d50:.2f}/{d99:.2f} ms",
                      flush=True)
    finally:
        if cluster:
            cluster.stop()
    print(json.dumps([dict(zip(["mode", "agents", "decisions_per_s", "wake_p50_ms", "wake_p99_ms",
                                    "server_cpu_ms_per_cycle", "ratio_to_ceiling", "written_kib_per_cycle",
                                    "ceiling_wake_p50_ms", "ceiling_wake_p99_ms", "wake_p50_to_ceiling",
                                    "wake_p99_to_ceiling", "decide_p50_ms", "decide_p99_ms"], r))
                      for r in rows]))


if __name__ == "__main__":
    main()
