#!/usr/bin/env python3
"""What tracing costs per request (issue 15 §1; BENCHMARKS.md "B6").

  cargo build --release -p assent
  python3 bench/tracing.py [--seconds 5] [--rounds 3] [--clients 1,8]

Two `assent serve` (release build, temporary config and SQLite data dirs, loopback) run side
by side on the same machine: one with tracing off (no OTEL variables), one exporting every
span over OTLP/HTTP protobuf (`OTEL_EXPORTER_OTLP_ENDPOINT`, the SDK's default batch
processor) to a sink in a separate process that reads each export and answers 200. Every
request carries a W3C `traceparent`, so the traced gateway continues the caller's trace. The
load is allowed `POST /v1/tool-calls` (each a committed `call.allowed` audit record, a request
span and an `assent.propose` span) from N keep-alive connections; phases alternate off, on,
off, on, ... so both see the same machine noise, and each "on" phase is compared with the
mean of the "off" phases beside it. Reported per client count: requests/s and per-request
latency (median, p99) of each, and the ratios on/off; and what the sink received (exports,
bytes), which must not be nothing.

Python standard library only (the client is `bench/waiters.py`'s raw HTTP/1.1 connection).
"""

import argparse
import asyncio
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from waiters import ASSENT, Conn, agent_key, free_port, sha  # noqa: E402

SINK = r"""
import json, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
seen = {"exports": 0, "bytes": 0}
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        with lock:
            out = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_POST(self):
        n = len(self.rfile.read(int(self.headers["Content-Length"])))
        with lock:
            seen["exports"] += 1
            seen["bytes"] += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def start(d, env):
    """An `assent serve` in directory `d` with `env`: (process, port)."""
    d.mkdir()
    (d / "a.agf.yaml").write_text(
        'schema_version: "1.0.0"\nmetadata: {id: bench, name: Bench, version: 1.0.0, description: bench}\n'
        "action_space:\n  local_tools:\n    - alias: noop\n")
    port = free_port()
    (d / "assent.yaml").write_text(
        f"listen: 127.0.0.1:{port}\ndata_dir: data\nagents: [a.agf.yaml]\n"
        "rate_limits: {requests_per_second: 1000000, burst: 1000000}\n"
        f"principals:\n  - {{name: agent0, kind: agent, agent_id: bench, key_sha256: \"{sha(agent_key(0))}\"}}\n")
    log = open(d / "serve.log", "w")
    p = subprocess.Popen([ASSENT, "serve", "--config", str(d / "assent.yaml")], stdout=log,
                         stderr=subprocess.STDOUT, env=env)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, port
        except OSError:
            time.sleep(0.1)
    p.kill()
    sys.exit("assent did not start: " + (d / "serve.log").read_text())


async def phase(port, clients, seconds, tag):
    """Allowed proposals from `clients` connections for `seconds`: (requests/s, latencies)."""
    stop = time.monotonic() + seconds
    lat = []

    async def worker(k):
        c = await Conn(port).open()
        i = 0
        while time.monotonic() < stop:
            i += 1
            tp = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
            t0 = time.perf_counter()
            st, _, b = await c.request(
                "POST", "/v1/tool-calls", agent_key(0),
                {"agent": "bench", "session_id": f"{tag}{k}-{i // 50}", "tool": "noop",
                 "arguments": {"c": k, "i": i}}, {"traceparent": tp})
            lat.append(time.perf_counter() - t0)
            if st != 200:
                raise RuntimeError(f"allowed call: {st} {b[:300]!r}")
        c.close()

    t0 = time.monotonic()
    await asyncio.gather(*(worker(k) for k in range(clients)))
    return len(lat) / (time.monotonic() - t0), lat


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5, help="length of each phase")
    ap.add_argument("--rounds", type=int, default=3, help="'on' phases (each between two 'off')")
    ap.add_argument("--clients", default="1,8", help="client counts, comma-separated")
    a = ap.parse_args()
    if not Path(ASSENT).exists():
        sys.exit("build assent first: cargo build --release -p assent")
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    sink_port = int(sink.stdout.readline())
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base["ASSENT_LOG"] = "warn"
    traced = dict(base, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink_port}")
    results = {}
    with tempfile.TemporaryDirectory() as d:
        off, off_port = start(Path(d) / "off", base)
        on, on_port = start(Path(d) / "on", traced)
        try:
            for clients in [int(c) for c in a.clients.split(",")]:
                asyncio.run(phase(off_port, clients, 1, "w"))  # warm-up both
                asyncio.run(phase(on_port, clients, 1, "w"))
                offs, ons = [], []
                for r in range(a.rounds):
                    offs.append(asyncio.run(phase(off_port, clients, a.seconds, f"a{r}")))
                    ons.append(asyncio.run(phase(on_port, clients, a.seconds, f"b{r}")))
                offs.append(asyncio.run(phase(off_port, clients, a.seconds, "a_last")))
                row = {}
                for name, runs in (("off", offs), ("on", ons)):
                    lat = [x for _, ls in runs for x in ls]
                    row[name] = {"rps": round(statistics.mean(r for r, _ in runs), 1),
                                 "median_ms": round(q(lat, 0.5) * 1e3, 3),
                                 "p99_ms": round(q(lat, 0.99) * 1e3, 3)}
                ratios = [ons[i][0] / ((offs[i][0] + offs[i + 1][0]) / 2) for i in range(a.rounds)]
                row["rps_ratio_on_off"] = round(statistics.mean(ratios), 3)
                row["median_ratio_on_off"] = round(row["on"]["median_ms"] / row["off"]["median_ms"], 3)
                row["median_added_ms"] = round(row["on"]["median_ms"] - row["off"]["median_ms"], 3)
                results[f"{clients}_clients"] = row
                print(clients, "clients:", json.dumps(row), flush=True)
            time.sleep(6)  # the batch processor's 5 s schedule: the last spans reach the sink
            with urllib.request.urlopen(f"http://127.0.0.1:{sink_port}/") as r:
                results["sink"] = json.loads(r.read())
            if results["sink"]["exports"] == 0:
                sys.exit("the traced gateway exported nothing: tracing was not on")
        finally:
            for p in (off, on, sink):
                p.terminate()
                p.wait(10)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
