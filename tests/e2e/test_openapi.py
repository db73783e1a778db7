"""End to end: the OpenAPI 3.1 document a real `assent serve` answers at `GET /openapi.json`
(no key) is valid (openapi-spec-validator), and Schemathesis, driven by it against the same
live gateway once with an agent's key and once with an operator's, finds no 5xx and no
response that the document does not describe (status code, content type, body schema).

The run is bounded (`MAX_EXAMPLES` cases per operation and phase, a fixed seed, so CI sees the
same cases each run). A long poll (`?wait=S`, at most 60 s) on an item Schemathesis created
answers after `S` seconds; st_hooks.py sends an in-range wait as 1 s (a run spent 3 of its
3.5 minutes waiting), and the request timeout stays at 65 s for a wait it leaves. Left out of the run: `GET /aaep/v1/events`, a server-sent event stream
that never ends (documented as `text/event-stream`; the AAEP tests read it)."""

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from openapi_spec_validator import validate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ASSENT = os.environ.get("ASSENT_BIN", str(ROOT / "target" / "debug" / "assent"))
ST = str(Path(sys.executable).parent / "st")
OPERATOR_KEY = "op-" + os.urandom(16).hex()
AGENT_KEY = "agent-" + os.urandom(16).hex()
# More cases or another seed for a long run: ASSENT_OPENAPI_EXAMPLES=200 ASSENT_OPENAPI_SEED=7.
MAX_EXAMPLES = int(os.environ.get("ASSENT_OPENAPI_EXAMPLES", "8"))
SEED = int(os.environ.get("ASSENT_OPENAPI_SEED", "15003"))
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"

AGENTS = """
metadata: {id: pay_bot, name: Payments Bot, version: 1.0.0, description: openapi e2e}
action_space:
  mcp_servers:
    - alias: bank
      allowed_tools:
        - name: send_payment
          approval: {message_template: "Pay {{tool_args.amount}}?"}
        - name: balance
"""

GOV = """
policies:
  - id: payments.v1
    selector: {agents: ["*"]}
    rules:
      - tool: send_payment
        server: bank
        risk_tier: R3
        timeout_seconds: 300
      - tool: balance
        server: bank
        risk_tier: R0
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    d = tmp_path_factory.mktemp("openapi")
    (d / "agents").mkdir()
    (d / "agents" / "pay.agf.yaml").write_text(AGENTS)
    (d / "gov").mkdir()
    (d / "gov" / "pay.yaml").write_text(GOV)
    port = free_port()
    sha = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    (d / "assent.yaml").write_text(
        f"""
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
governance: ["gov/*.yaml"]
principals:
  - {{name: alice, kind: operator, roles: [finance], key_sha256: "{sha(OPERATOR_KEY)}"}}
  - {{name: pay-bot, kind: agent, agent_id: pay_bot, key_sha256: "{sha(AGENT_KEY)}"}}
"""
    )
    url = f"http://127.0.0.1:{port}"
    log = open(d / "serve.log", "a")
    proc = subprocess.Popen([ASSENT, "serve", "--config", str(d / "assent.yaml")], stdout=log, stderr=log)
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("gateway did not start: " + (d / "serve.log").read_text())
    yield {"url": url, "dir": d, "proc": proc}
    proc.terminate()
    proc.wait(10)
    log.close()


def test_the_served_document_is_valid_openapi_3_1_and_needs_no_key(gateway):
    with urllib.request.urlopen(gateway["url"] + "/openapi.json", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "application/json"
        doc = json.load(r)
    assert doc["openapi"] == "3.1.0"
    validate(doc)  # raises on any violation of the OpenAPI 3.1 schema
    assert "/v1/tool-calls" in doc["paths"] and "/openapi.json" in doc["paths"]
    assert set(doc["components"]["securitySchemes"]) == {"agent_key", "operator_key", "executor_key"}


def schemathesis(gateway, key, tmp_path):
    """Runs Schemathesis against the live gateway with bearer `key`; fails with its report."""
    cmd = [ST, "run", gateway["url"] + "/openapi.json",
           "--checks", CHECKS,
           "--header", f"Authorization: Bearer {key}",
           "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
           "--workers", "1", "--request-timeout", "65", "--no-shrink",
           "--exclude-path", "/aaep/v1/events",
           "--report", "junit", "--report-dir", str(tmp_path / "report")]
    env = dict(os.environ, NO_COLOR="1", SCHEMATHESIS_HOOKS="st_hooks",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    print(r.stdout[-6000:])
    assert gateway["proc"].poll() is None, "the gateway exited: " + (gateway["dir"] / "serve.log").read_text()[-4000:]
    assert r.returncode == 0, r.stdout[-20000:] + r.stderr[-4000:]


def test_schemathesis_with_an_agent_key_finds_no_5xx_and_no_undocumented_response(gateway, tmp_path):
    schemathesis(gateway, AGENT_KEY, tmp_path)


def test_schemathesis_with_an_operator_key_finds_no_5xx_and_no_undocumented_response(gateway, tmp_path):
    schemathesis(gateway, OPERATOR_KEY, tmp_path)
