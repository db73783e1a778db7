"""End to end: the life of the `assent mcp` stdio proxy process itself. When its upstream MCP
server exits, the proxy exits too, with the upstream's exit status, even while the client keeps
its end open (a regression test: it used to hang, waiting on its own writer to the client)."""

import json
import os
import subprocess
import sys

from test_mcp_proxy import AGENT_KEY, ASSENT, gateway  # noqa: F401  (gateway is a fixture)

# An MCP upstream that answers `initialize`, then exits with status 3.
EXITS_AFTER_INITIALIZE = r"""
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "short-lived", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
        sys.exit(3)
"""


def test_the_proxy_exits_with_the_upstream_s_status_when_the_upstream_exits(gateway):
    env = dict(os.environ, ASSENT_URL=gateway["url"], ASSENT_API_KEY=AGENT_KEY)
    proc = subprocess.Popen(
        [ASSENT, "mcp", "--agent", "fs_agent", "--server", "fs", "--session", "lifecycle", "--poll-seconds", "2",
         "--", sys.executable, "-c", EXITS_AFTER_INITIALIZE],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 0 and answer["result"]["serverInfo"]["name"] == "short-lived", answer
        # The client keeps stdin open: only the upstream's exit can end the proxy.
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the proxy did not exit within 10 s of its upstream exiting") from None
        assert code == 3, f"the proxy exited with {code}, not the upstream's 3"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
