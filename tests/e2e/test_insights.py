"""End to end: the insights page (issue 16 §4) in a real browser (Debian's Chromium driven by
Playwright, `insights.mjs`) against a real `assent serve`: a history made over the API, the
server-drawn SVG charts with their accessible names, the tables' numbers, a planted
always-approved pattern suggested with its YAML export, axe-core clean."""

import hashlib
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "debug" / "assent"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
OPERATOR_KEY = "op-" + os.urandom(16).hex()
AGENT_KEY = "agent-" + os.urandom(8).hex()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def gateway(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "pay.agf.yaml").write_text(
        """
metadata: {id: pay_bot, name: Payments Bot, version: 1.0.0, description: insights e2e}
action_space:
  local_tools:
    - {alias: pay, approval: true}
    - {alias: ship, approval: true}
    - {alias: refund, approval: {condition: {args_match: {to: {not_pattern: "^internal-"}}}}}
    - alias: lookup
"""
    )
    (tmp_path / "gov").mkdir()
    (tmp_path / "gov" / "gov.yaml").write_text(
        """
policies:
  - id: insights.v1
    selector: {agents: ["*"]}
    rules:
      - tool: pay
        risk_tier: R2
"""
    )
    port = free_port()
    (tmp_path / "assent.yaml").write_text(
        f"""
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
governance: ["gov/*.yaml"]
principals:
  - {{name: alice, kind: operator, roles: [finance], key_env: E2E_ALICE_KEY}}
  - {{name: pay-bot, kind: agent, agent_id: pay_bot, key_sha256: "{hashlib.sha256(AGENT_KEY.encode()).hexdigest()}"}}
"""
    )
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "a")
    proc = subprocess.Popen([ASSENT, "serve", "--config", str(tmp_path / "assent.yaml")],
                            env=dict(os.environ, E2E_ALICE_KEY=OPERATOR_KEY), stdout=log, stderr=log)
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("gateway did not start: " + (tmp_path / "serve.log").read_text())
    yield {"url": url, "dir": tmp_path}
    proc.terminate()
    proc.wait(10)
    log.close()


def test_insights_page_in_a_real_browser(gateway, tmp_path):
    env = dict(os.environ, ASSENT_URL=gateway["url"], OPERATOR_KEY=OPERATOR_KEY, AGENT_KEY=AGENT_KEY,
               CHROMIUM=CHROMIUM)
    r = subprocess.run(["node", str(HERE / "insights.mjs")], env=env, capture_output=True, text=True, timeout=240)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr + (gateway["dir"] / "serve.log").read_text()[-4000:]
