#!/usr/bin/env python3
"""A noisy neighbour (issue 13, the store executor's turns between principals): what one
principal holding many requests in flight does to the other principals' proposals and
decisions, on SQLite.

  cargo build --release -p assent
  python3 bench/neighbour.py [--seconds 8] [--agents 4] [--flood 256] [--bins LABEL=PATH,...]

Each cell starts one gateway (the config of `replicas.py`, plus a `read` tool no rule holds and
a flooding agent principal) and runs `benches/load.rs`: `--agents` agents each run cycles
(propose a held call, long-poll it while their operator decides it), and with `--flood N` one
more principal keeps N allowed proposals in flight on N connections (asking again at once
after a `429`). `--default-rates` keeps the default `rate_limits` (the config of `replicas.py`
lifts them). Reported per build and
cell: the agents' cycles/s, their propose round trip and decision-to-wake-up p50/p99, the
flood's calls/s; then, per build, the flooded figures as multiples of the quiet ones. `--bins`
compares builds in the same run (default: `target/release/assent` as `this`), e.g. one built
with the executor first come, first served. Bounded: every cell runs a fixed time and its
gateway is stopped at the end in every case.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replicas  # noqa: E402  (the gateway start, keys and bench builds of B3)

FLOOD_KEY = "bench-flood-key-0123456789"


def write_config(d, agents, default_rates):
    """`replicas.write_config`'s, plus an allowed `read` tool and the flooding principal; with
    `default_rates`, the default `rate_limits` (1,000/s, bursts of 2,000 per principal)."""
    cfg = Path(replicas.write_config(d, agents, None))
    if default_rates:
        text = cfg.read_text()
        line = "rate_limits: {requests_per_second: 1000000, burst: 1000000}\n"
        assert line in text
        cfg.write_text(text.replace(line, ""))
    agf = Path(d, "bench.agf.yaml")
    agf.write_text(agf.read_text() + "    - alias: read\n")
    flood = (f"  - {{name: flood, kind: agent, agent_id: bench, "
             f"key_sha256: \"{replicas.sha(FLOOD_KEY)}\"}}\n")
    cfg.write_text(cfg.read_text() + flood)
    return cfg


def cell(binary, agents, flood, seconds, default_rates=False):
    """One gateway of `binary`, `agents` measured agents, `flood` flood connections: load.rs's
    JSON line, with the cycle rate."""
    with tempfile.TemporaryDirectory() as d:
        cfg = write_config(d, agents, default_rates)
        replicas.ASSENT = binary
        proc, port = replicas.start(cfg, None)
        try:
            cmd = [replicas.bench_bin("load"), "--ports", str(port), "--agents", str(agents),
                   "--seconds", str(seconds), "--op-key", replicas.OP_KEY, "--flood", str(flood)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                 timeout=seconds + 120).stdout
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    r = json.loads(out.strip().splitlines()[-1])
    r["rate"] = r["cycles"] / r["seconds"]
    r["flood_rate"] = r["flood_calls"] / r["seconds"]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--flood", type=int, default=256)
    ap.add_argument("--bins", default=f"this={replicas.ASSENT}")
    ap.add_argument("--default-rates", action="store_true",
                    help="the default rate_limits (1,000/s a principal) instead of none")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bins.split(",")]
    keys = ["propose_p50_ms", "propose_p99_ms", "wake_p50_ms", "wake_p99_ms"]
    for label, binary in bins:
        quiet = cell(binary, a.agents, 0, a.seconds, a.default_rates)
        loud = cell(binary, a.agents, a.flood, a.seconds, a.default_rates)
        for name, r in (("quiet", quiet), (f"flood={a.flood}", loud)):
            print(f"{label:8} {name:10} agents={a.agents} cycles/s={r['rate']:7.1f} "
                  f"propose p50/p99={r['propose_p50_ms']:7.2f}/{r['propose_p99_ms']:7.2f} ms "
                  f"wake p50/p99={r['wake_p50_ms']:7.2f}/{r['wake_p99_ms']:7.2f} ms "
                  f"flood calls/s={r['flood_rate']:7.1f}", flush=True)
        times = " ".join(f"{k[:-3]}={loud[k] / quiet[k]:.1f}×" for k in keys)
        print(f"{label:8} flooded ÷ quiet: cycles/s={loud['rate'] / quiet['rate']:.2f}× {times}",
              flush=True)


if __name__ == "__main__":
    main()
