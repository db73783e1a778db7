"""End to end: passkey-signed approvals (issue 14 §4) in a real browser (Debian's Chromium
with a virtual WebAuthn authenticator, `passkeys.mjs`) against a real `assent serve`; the
receipt of the passkey-signed approval verifies offline with `assent receipt verify`, and fails
after a byte of the call or of the assertion changes."""

import hashlib
import json
import os
import subprocess
import time
import urllib.request

from test_dashboard import ASSENT, CHROMIUM, HERE, free_port

OPERATOR_KEY = "op-" + os.urandom(16).hex()
AGENT_KEY = "agent-" + os.urandom(8).hex()


def serve(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "pay.agf.yaml").write_text(
        "metadata: {id: pay_bot, name: Payments Bot, version: 1.0.0, description: passkeys e2e}\n"
        "action_space:\n  local_tools:\n    - alias: wire_transfer\n      approval: true\n"
    )
    (tmp_path / "gov").mkdir()
    (tmp_path / "gov" / "wire.yaml").write_text(
        "policies:\n  - id: payments.wire-v1\n    selector: {agents: [\"*\"]}\n    rules:\n"
        "      - {tool: wire_transfer, risk_tier: R4, irreversible: true, approvers: [finance]}\n"
    )
    port = free_port()
    url = f"http://localhost:{port}"
    (tmp_path / "assent.yaml").write_text(
        f"""
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
governance: ["gov/*.yaml"]
passkeys: {{origin: "{url}"}}
principals:
  - {{name: alice, kind: operator, roles: [finance], key_env: E2E_ALICE_KEY}}
  - {{name: pay-bot, kind: agent, agent_id: pay_bot, key_sha256: "{hashlib.sha256(AGENT_KEY.encode()).hexdigest()}"}}
"""
    )
    log = open(tmp_path / "serve.log", "a")
    proc = subprocess.Popen([ASSENT, "serve", "--config", str(tmp_path / "assent.yaml")],
                            env=dict(os.environ, E2E_ALICE_KEY=OPERATOR_KEY), stdout=log, stderr=log)
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1)
            return proc, url, log
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gateway did not start: " + (tmp_path / "serve.log").read_text())


def enrol(tmp_path):
    """A one-time enrolment code for alice from `assent passkeys enrol`."""
    r = subprocess.run([ASSENT, "passkeys", "enrol", "alice", "--config",
                        str(tmp_path / "assent.yaml"), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["code"]


def verify(receipt, data_dir, *extra):
    return subprocess.run([ASSENT, "receipt", "verify", str(receipt), "--data-dir", str(data_dir),
                           *extra], capture_output=True, text=True, timeout=60)


def test_passkey_signed_approval_in_a_real_browser(tmp_path):
    proc, url, log = serve(tmp_path)
    try:
        receipt = tmp_path / "receipt.json"
        code, code2 = enrol(tmp_path), enrol(tmp_path)
        env = dict(os.environ, ASSENT_URL=url, OPERATOR_KEY=OPERATOR_KEY, AGENT_KEY=AGENT_KEY,
                   CHROMIUM=CHROMIUM, RECEIPT=str(receipt), ENROLMENT_CODE=code,
                   ENROLMENT_CODE_2=code2, DATABASE=str(tmp_path / "data" / "assent.db"))
        r = subprocess.run(["node", str(HERE / "passkeys.mjs")], env=env, capture_output=True,
                           text=True, timeout=240)
        print(r.stdout)
        assert r.returncode == 0, r.stdout + r.stderr + (tmp_path / "serve.log").read_text()[-4000:]
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    data = tmp_path / "data"
    ok = verify(receipt, data)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    original = json.loads(receipt.read_text())
    # The receipt carries the key it was signed with; which operator owns that key is the
    # passkey.registered audit record, so the verifier is shown what to compare (found by
    # review: the audit key's holder could put a fresh key in a receipt).
    proof = original["decisions"][0]["passkey"]
    shown = (f"passkey: alice signed with credential {proof['credential_id']} "
             f"(EC P-256 x={proof['public_key']['x']} y={proof['public_key']['y']})")
    assert shown in ok.stdout, ok.stdout
    # The browser's assertion names the dashboard's origin; --origin holds it there.
    assert f"for localhost at {url};" in ok.stdout, ok.stdout
    assert verify(receipt, data, "--origin", url).returncode == 0
    elsewhere = verify(receipt, data, "--origin", "https://localhost")
    assert elsewhere.returncode == 1, elsewhere.stdout
    assert "made at another origin" in elsewhere.stdout, elsewhere.stdout
    # A byte of the call changed: the gateway's signature and call_hash no longer hold.
    edited = json.loads(json.dumps(original))
    edited["call"]["arguments"]["amount"] = 250001
    receipt.write_text(json.dumps(edited))
    assert verify(receipt, data).returncode == 1
    # A byte of the assertion changed: the receipt no longer verifies.
    edited = json.loads(json.dumps(original))
    sig = edited["decisions"][0]["passkey"]["signature"]
    edited["decisions"][0]["passkey"]["signature"] = ("A" if sig[0] != "A" else "B") + sig[1:]
    receipt.write_text(json.dumps(edited))
    bad = verify(receipt, data)
    assert bad.returncode == 1, bad.stdout + bad.stderr
