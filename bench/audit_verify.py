#!/usr/bin/env python3
"""B5: `assent audit verify` throughput beside `sha256sum` over the same audit bytes
(issue 13 §6; BENCHMARKS.md "B5").

  cargo build --release -p assent
  python3 bench/audit_verify.py [--records 100000] [--clients 16] [--runs 5]
  ASSENT_BIN=/path/to/other/assent python3 bench/audit_verify.py     # another build

1. Fills a fresh store through the real API: a temporary `assent serve` (loopback, SQLite,
   `synchronous=FULL`) takes N allowed `POST /v1/tool-calls` from several keep-alive clients;
   each is a committed `call.allowed` audit record. The gateway is stopped with SIGTERM (its
   shutdown checkpoint signs the whole chain).
2. Writes the audit records, oldest first, as JSONL (the fields of a record, one per line, as
   an `assent audit archive` export holds them) to a file: "the store's audit bytes".
3. Times, in turn A B A B …, `assent audit verify --data-dir DATA` (the whole offline check:
   the hash chain, recomputing every record's SHA-256 over its canonical JSON, the signed
   checkpoints and the state tables) and `sha256sum FILE` (one SHA-256 over the same bytes,
   the ceiling of any check that reads them once); each run after one warm-up of each, both
   from the page cache. Prints the medians: records/s, MB/s of audit bytes, and the ratio of
   the two wall times taken pair by pair.

Python standard library only. Everything is made in a temporary directory under /tmp and
removed at the end (also on failure); the server is stopped in every case.
"""

import argparse
import asyncio
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "release" / "assent"))
KEY = "bench-agent-key-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def post(r, w, body):
    data = json.dumps(body).encode()
    w.write((f"POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
             f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
    await w.drain()
    head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1")
    status = int(head.split()[1])
    length = next(int(l.split(":")[1]) for l in head.split("\r\n") if l.lower().startswith("content-length:"))
    body = await r.readexactly(length)
    if status != 200:
        raise RuntimeError(f"allowed call: {status} {body[:300]!r}")


async def fill(port, n, clients):
    """`n` allowed calls from `clients` connections; a new session every 50 calls."""
    async def worker(k):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        for i in range(k, n, clients):
            await post(r, w, {"agent": "bench", "session_id": f"s{k}-{i // 50}", "tool": "noop",
                              "arguments": {"client": k, "i": i, "path": f"/srv/data/file-{i}.txt",
                                            "note": "audit retention benchmark"}})
        w.close()

    await asyncio.gather(*(worker(k) for k in range(clients)))


def serve_and_fill(d, n, clients):
    (d / "a.agf.yaml").write_text(
        'schema_version: "1.0.0"\nmetadata: {id: bench, name: Bench, version: 1.0.0, description: bench}\n'
        "action_space:\n  local_tools:\n    - alias: noop\n")
    port = free_port()
    (d / "assent.yaml").write_text(
        f"listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [a.agf.yaml]\n"
        "rate_limits: {requests_per_second: 1000000, burst: 1000000}\n"
        "principals:\n"
        f"  - {{name: bot, kind: agent, agent_id: bench, key_sha256: \"{hashlib.sha256(KEY.encode()).hexdigest()}\"}}\n")
    log = open(d / "serve.log", "w")
    serve = subprocess.Popen([ASSENT, "serve", "--config", str(d / "assent.yaml")],
                             stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG="warn"))
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        t0 = time.monotonic()
        asyncio.run(fill(port, n, clients))
        print(f"filled: {n} allowed calls in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
        log.close()


def dump(db, out):
    """The audit records as JSONL into `out`; returns (records, bytes)."""
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n = 0
    with open(out, "w") as f:
        for seq, at, kind, aid, actor, data, prev, h in c.execute(
                "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit ORDER BY seq"):
            f.write(json.dumps({"seq": seq, "at": at, "kind": kind, "approval_id": aid, "actor": actor,
                                "data": data, "prev_hash": prev, "hash": h}, separators=(",", ":")) + "\n")
            n += 1
    c.close()
    return n, os.path.getsize(out)


def timed(cmd):
    """(wall seconds, child CPU seconds) of `cmd`, which must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} {cmd[1:3]} exited {p.returncode}: {p.stderr[:500]!r}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if not (1_000 <= a.records <= 10_000_000 and 1 <= a.clients <= 256 and 1 <= a.runs <= 100):
        sys.exit("--records 1000..10000000, --clients 1..256, --runs 1..100")
    d = Path(tempfile.mkdtemp(prefix="assent-b5-", dir="/tmp"))
    try:
        serve_and_fill(d, a.records, a.clients)
        data = d / "data"
        n, size = dump(data / "assent.db", d / "audit.jsonl")
        db_size = os.path.getsize(data / "assent.db")
        verify = [ASSENT, "audit", "verify", "--data-dir", str(data)]
        sha = ["sha256sum", str(d / "audit.jsonl")]
        timed(verify), timed(sha)  # warm-up: both from the page cache
        va, sa, ratios = [], [], []
        for _ in range(a.runs):
            v, s = timed(verify), timed(sha)
            va.append(v)
            sa.append(s)
            ratios.append(v[0] / s[0])
        mb = size / 1e6
        med = lambda xs, i: statistics.median(x[i] for x in xs)
        print(f"audit records: {n}; their bytes (JSONL): {mb:.1f} MB; database file {db_size / 1e6:.1f} MB")
        for name, xs in (("assent audit verify", va), ("sha256sum", sa)):
            w, c = med(xs, 0), med(xs, 1)
            print(f"{name:20} wall {w * 1000:8.1f} ms (min {min(x[0] for x in xs) * 1000:.1f}, max "
                  f"{max(x[0] for x in xs) * 1000:.1f})  cpu {c * 1000:8.1f} ms  "
                  f"{n / w:12,.0f} records/s  {mb / w:8.1f} MB/s")
        print(f"ratio verify / sha256sum (wall, pair by pair): median {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
