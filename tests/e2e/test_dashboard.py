"""End to end: the operator dashboard in a real browser (Debian's Chromium driven by
Playwright, `dashboard.mjs`) against a real `assent serve`, with axe-core's accessibility
rules run in the same browser."""

import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "debug" / "assent"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
OPERATOR_KEY = "op-" + os.urandom(16).hex()
OLAF_KEY = "olaf-" + os.urandom(16).hex()
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
metadata: {id: pay_bot, name: Payments Bot, version: 1.0.0, description: dashboard e2e}
action_space:
  mcp_servers:
    - alias: bank
      allowed_tools:
        - name: send_payment
          approval: {message_template: "Pay {{tool_args.amount}} {{tool_args.currency}} to {{tool_args.to}}?"}
    - alias: notes
      allowed_tools:
        - name: publish
          approval: {message_template: "Publish {{tool_args.text}}?"}
"""
    )
    (tmp_path / "gov").mkdir()
    (tmp_path / "gov" / "pay.yaml").write_text(
        """
policies:
  - id: payments.v1
    selector: {agents: ["*"]}
    rules:
      - tool: send_payment
        server: bank
        risk_tier: R3
        timeout_seconds: 300
        side_effects: "Moves {{tool_args.amount}} {{tool_args.currency}} out of the treasury account to {{tool_args.to}}."
        rollback: "A payment can be recalled within 24 h by the bank's recall desk; after that it is final."
        suggested_alternatives: ["Split the payment below 1000 EUR"]
      - tool: publish
        server: notes
        approvers: [finance]
        dry_run_tool: echo
"""
    )
    port = free_port()
    (tmp_path / "assent.yaml").write_text(
        f"""
mcp_upstreams:
  notes: {{command: ["{sys.executable}", "{HERE / 'changing_server.py'}"], env: {{CALL_LOG: "{tmp_path / 'calls.log'}"}}}}
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
governance: ["gov/*.yaml"]
principals:
  - {{name: alice, kind: operator, roles: [finance], key_env: E2E_ALICE_KEY}}
  - {{name: olaf, kind: operator, roles: [ops], key_sha256: "{hashlib.sha256(OLAF_KEY.encode()).hexdigest()}"}}
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


def test_dashboard_in_a_real_browser(gateway, tmp_path):
    env = dict(os.environ, ASSENT_URL=gateway["url"], OPERATOR_KEY=OPERATOR_KEY, AGENT_KEY=AGENT_KEY,
               CHROMIUM=CHROMIUM, PROFILE_DIR=str(tmp_path / "chromium"))
    r = subprocess.run(["node", str(HERE / "dashboard.mjs")], env=env, capture_output=True, text=True, timeout=240)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr + (gateway["dir"] / "serve.log").read_text()[-4000:]
    # The dry run reached the upstream as `echo`; the held `publish` never ran.
    assert (gateway["dir"] / "calls.log").read_text().splitlines() == ["echo draft post"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _send(url, method="GET", body=None, headers=None):
    """One request, redirects kept as answers: (status, headers, text)."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def test_only_an_approver_runs_a_dry_run(gateway):
    """Found by review: the dry-run form checked only the session and its CSRF token, so any
    signed-in operator (olaf, roles [ops]) could run the upstream tool with the agent's
    arguments, again and again, on an approval only `finance` may decide. He gets 403 and the
    upstream is never called."""
    import json
    url = gateway["url"]
    status, _, text = _send(url + "/v1/tool-calls", "POST", json.dumps({
        "agent": "pay_bot", "session_id": "dry-run-roles", "tool": "publish", "server": "notes",
        "arguments": {"text": "olaf's try"}}),
        {"authorization": "Bearer " + AGENT_KEY, "content-type": "application/json"})
    assert status in (200, 202), text
    approval = json.loads(text)["approval_id"]
    csrf = "c" * 64
    status, headers, text = _send(url + "/ui/login", "POST", f"csrf={csrf}&key={OLAF_KEY}&next=%2Fui",
                                  {"cookie": f"assent_ui_login={csrf}",
                                   "content-type": "application/x-www-form-urlencoded"})
    assert status == 303, text
    cookie = headers["set-cookie"].split(";")[0]
    status, _, page = _send(url + f"/ui/approvals/{approval}", headers={"cookie": cookie})
    assert status == 200, page
    form_csrf = page.split('name="csrf" value="')[1].split('"')[0]
    status, _, page = _send(url + f"/ui/approvals/{approval}/dry-run", "POST", f"csrf={form_csrf}",
                            {"cookie": cookie, "content-type": "application/x-www-form-urlencoded"})
    assert status == 403, page
    assert "Nothing was run" in page
    calls = gateway["dir"] / "calls.log"
    assert not calls.exists() or "olaf" not in calls.read_text()
