"""End to end: assent behind a real Caddy from Debian with TLS on loopback (issue 15 §6).
Caddy's own local CA (`tls internal`) signs the certificate; clients trust only that root.

Checked through the proxy and around it, with clients on distinct loopback addresses:
- the dashboard's cookies are `__Host-` prefixed (`Secure`, `Path=/`, no `Domain`) over
  https, and also when reached directly over http, as the gateway's `public_url` is https; an
  un-prefixed session cookie (what a sibling subdomain can plant) signs no one in;
- `X-Forwarded-For` is believed only from the configured proxy: behind Caddy two clients are
  told apart by the failed-authentication throttle, and neither a direct client nor one
  behind the proxy escapes a lock-out by sending a forged `X-Forwarded-For`;
- the dashboard's SSE stream passes through unbuffered (an event arrives while the stream is
  open), and a long-poll through the proxy is answered when the approval is decided.
"""

import hashlib
import http.client
import json
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse

import pytest

from test_dashboard import ASSENT, free_port

OPERATOR_KEY = "op-" + os.urandom(16).hex()
AGENT_KEY = "agent-" + os.urandom(16).hex()
# Operators each used once to see whether a locked-out address is refused: a principal that
# authenticated from an address passes that address's lock-out afterwards, so a check that
# came after the lock-out lapsed must not spoil the next one.
PROBE_KEYS = [f"probe-{i}-" + os.urandom(16).hex() for i in range(16)]
CADDY = shutil.which("caddy") or "/usr/bin/caddy"


def free_listen_port():
    """A port below the kernel's ephemeral range, free on every interface, for caddy (which
    listens on `:PORT`). A `free_port()` port is ephemeral: any outgoing connection of the
    parallel workers could take it between the check and caddy's bind — seen in CI as caddy's
    "bind: address already in use" and a fixture that never came up."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(200):
        p = random.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("", p))
            except OSError:
                continue
            return p
    return free_port()


@pytest.fixture()
def stack(tmp_path):
    if not os.path.exists(CADDY):
        pytest.fail("caddy is not installed (scripts/test.sh installs Debian's)")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "ops.agf.yaml").write_text(
        "metadata: {id: ops_bot, name: Ops Bot, version: 1.0.0, description: proxy e2e}\n"
        "action_space:\n  local_tools:\n    - alias: deploy\n      approval: true\n"
    )
    port, tls_port = free_port(), free_listen_port()
    (tmp_path / "assent.yaml").write_text(f"""
listen: 127.0.0.1:{port}
data_dir: data
agents: ["agents/*.agf.yaml"]
public_url: https://127.0.0.1:{tls_port}
trusted_proxies: [127.0.0.1]
principals:
  - {{name: alice, kind: operator, key_env: E2E_ALICE_KEY}}
  - {{name: ops-bot, kind: agent, agent_id: ops_bot, key_sha256: "{hashlib.sha256(AGENT_KEY.encode()).hexdigest()}"}}
""" + "".join(f"  - {{name: probe-{i}, kind: operator, roles: [probe], key_sha256: "
              f"\"{hashlib.sha256(k.encode()).hexdigest()}\"}}\n" for i, k in enumerate(PROBE_KEYS)))
    caddy_home = tmp_path / "caddy"
    caddy_home.mkdir()
    (tmp_path / "Caddyfile").write_text(f"""
{{
	admin off
	grace_period 2s
	skip_install_trust
	storage file_system {caddy_home}
}}
https://127.0.0.1:{tls_port} {{
	tls internal
	reverse_proxy 127.0.0.1:{port} {{
		flush_interval -1
	}}
}}
""")
    log = open(tmp_path / "serve.log", "a")
    env = dict(os.environ, E2E_ALICE_KEY=OPERATOR_KEY, HOME=str(caddy_home),
               XDG_DATA_HOME=str(caddy_home), XDG_CONFIG_HOME=str(caddy_home))
    gw = subprocess.Popen([ASSENT, "serve", "--config", str(tmp_path / "assent.yaml")],
                          env=env, stdout=log, stderr=log)
    caddy = subprocess.Popen([CADDY, "run", "--adapter", "caddyfile", "--config",
                              str(tmp_path / "Caddyfile")], env=env, stdout=log, stderr=log)
    root = caddy_home / "pki" / "authorities" / "local" / "root.crt"
    try:
        ctx = None
        for _ in range(200):
            if root.exists():
                ctx = ssl.create_default_context(cafile=str(root))
                try:
                    if request(("127.0.0.1", tls_port), "GET", "/healthz", ctx=ctx)[0] == 200:
                        break
                except (OSError, ssl.SSLError):
                    pass
            time.sleep(0.1)
        else:
            raise RuntimeError("caddy/assent did not start: " + (tmp_path / "serve.log").read_text())
        yield {"direct": ("127.0.0.1", port), "proxy": ("127.0.0.1", tls_port), "ctx": ctx}
    finally:
        for p in (caddy, gw):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        log.close()


def connect(addr, ctx=None, source="127.0.0.1", timeout=60):
    if ctx is None:
        return http.client.HTTPConnection(*addr, timeout=timeout, source_address=(source, 0))
    return http.client.HTTPSConnection(*addr, timeout=timeout, context=ctx,
                                       source_address=(source, 0))


def request(addr, method, path, key=None, body=None, headers=None, ctx=None,
            source="127.0.0.1"):
    """One request on a fresh connection from `source`: (status, headers, body text)."""
    c = connect(addr, ctx, source)
    h = dict(headers or {})
    if key:
        h["Authorization"] = "Bearer " + key
    data = None
    if body is not None:
        data = body if isinstance(body, str) else json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = (r.status, r.getheaders(), r.read().decode())
    c.close()
    return out


def set_cookies(headers):
    return [v for k, v in headers if k.lower() == "set-cookie"]


def sign_in(addr, ctx=None, source="127.0.0.1", headers=None):
    """The dashboard's sign-in form, then the form posted: the session's Set-Cookie (the
    sign-in form's cookie checked on the way)."""
    status, h, page = request(addr, "GET", "/ui/login", ctx=ctx, source=source, headers=headers)
    assert status == 200, page
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    login_cookie = set_cookies(h)[0].split(";")[0]
    assert login_cookie.startswith("__Host-assent_ui_login="), set_cookies(h)
    assert host_only(set_cookies(h)[0]), set_cookies(h)
    form = urllib.parse.urlencode({"key": OPERATOR_KEY, "csrf": csrf, "next": "/ui"})
    status, h, page = request(addr, "POST", "/ui/login", body=form, ctx=ctx, source=source,
                              headers={**(headers or {}), "Cookie": login_cookie,
                                       "Content-Type": "application/x-www-form-urlencoded"})
    assert status in (302, 303), (status, page)
    return [c for c in set_cookies(h) if c.startswith("__Host-assent_ui=")][0]


def host_only(set_cookie):
    """Whether a Set-Cookie keeps the `__Host-` rules: `Secure`, `Path=/`, no `Domain`."""
    attrs = [a.strip().lower() for a in set_cookie.split(";")[1:]]
    return "secure" in attrs and "path=/" in attrs and not any(a.startswith("domain") for a in attrs)


def test_dashboard_cookies_are_host_prefixed_when_published_over_tls(stack):
    through_proxy = sign_in(stack["proxy"], stack["ctx"], source="127.0.0.3")
    assert host_only(through_proxy), through_proxy
    # Reached directly over http, the gateway published at an https `public_url` still names
    # and marks its cookie so, and the browser never sends it in the clear. (A client's forged
    # X-Forwarded-Proto earning nothing without such a `public_url` is
    # `access::the_session_cookie_is_secure_when_the_gateway_is_published_over_https`.)
    direct = sign_in(stack["direct"], source="127.0.0.2")
    assert host_only(direct), direct
    # Attack: a sibling subdomain plants the same session under the un-prefixed name (the
    # only one it can set for this host); it is never read.
    session = through_proxy.split(";")[0]
    planted = session.removeprefix("__Host-")
    for cookie, status in [(planted, 303), (session, 200)]:
        got, _, page = request(stack["proxy"], "GET", "/ui", ctx=stack["ctx"], source="127.0.0.3",
                               headers={"Cookie": cookie})
        assert got == status, (cookie.split("=")[0], got, page[:200])


def lock_out(addr, ctx=None, source="127.0.0.1", headers=None):
    wrong = "wrong-" + os.urandom(16).hex()
    for _ in range(40):
        status, _, _ = request(addr, "GET", "/v1/approvals", wrong, ctx=ctx, source=source,
                               headers=headers)
        if status == 429:
            return
    pytest.fail("40 wrong keys in a row were never throttled")


def still_locked(addr, ctx=None, source="127.0.0.1", lock_headers=None, headers=None, tries=5):
    """Whether a right key from `source` (with `headers`) is refused right after `source` was
    locked out (with `lock_headers` on the guesses). The lock-out lasts until one failure's
    allowance refills (200 ms at 5 a second), which a loaded machine can spend between two
    requests, so the lock-out is made afresh for each of `tries` checks, each with a principal
    never seen from `source` (one seen there passes its lock-out): a gateway that told the
    addresses apart would answer 200 every time."""
    for _ in range(tries):
        lock_out(addr, ctx, source=source, headers=lock_headers)
        if request(addr, "GET", "/v1/approvals", PROBE_KEYS.pop(), ctx=ctx, source=source,
                   headers=headers)[0] == 429:
            return True
    return False


def test_forwarded_for_is_believed_only_from_the_proxy(stack):
    proxy, ctx, direct = stack["proxy"], stack["ctx"], stack["direct"]
    # Behind Caddy, a guessing client is locked out, and another is not: told apart by the
    # X-Forwarded-For Caddy sets, not lumped together as the proxy's address.
    assert still_locked(proxy, ctx, source="127.0.0.3")
    assert request(proxy, "GET", "/v1/approvals", OPERATOR_KEY, ctx=ctx, source="127.0.0.4")[0] == 200
    # A forged X-Forwarded-For through the proxy does not lift the lock-out (Caddy replaces it).
    forged = {"X-Forwarded-For": "10.9.9.9"}
    assert still_locked(proxy, ctx, source="127.0.0.3", headers=forged)
    # Directly, X-Forwarded-For is not believed: guessing "from" another address still locks
    # out the real peer, and a forged address does not get it out again.
    assert still_locked(direct, source="127.0.0.2", lock_headers={"X-Forwarded-For": "10.0.0.7"},
                        headers={"X-Forwarded-For": "10.1.1.1"})
    assert request(direct, "GET", "/v1/approvals", OPERATOR_KEY, source="127.0.0.5")[0] == 200


def test_sse_and_long_polls_pass_through_the_proxy(stack):
    proxy, ctx = stack["proxy"], stack["ctx"]
    session = sign_in(proxy, ctx, source="127.0.0.6").split(";")[0]
    stream = connect(proxy, ctx, timeout=20)
    stream.request("GET", "/ui/events", headers={"Cookie": session, "Accept": "text/event-stream"})
    events = stream.getresponse()
    assert events.status == 200
    assert events.getheader("Content-Type").startswith("text/event-stream")

    deploy = {"agent": "ops_bot", "session_id": "s1", "tool": "deploy",
              "arguments": {"service": "api"}}
    status, _, body = request(proxy, "POST", "/v1/tool-calls", AGENT_KEY, deploy, ctx=ctx)
    assert status == 202, body
    aid = json.loads(body)["approval_id"]
    # The change reaches the open stream through Caddy (a buffering proxy would hold it).
    seen = []
    while not any(line.startswith("event: changed") for line in seen):
        line = events.fp.readline().decode()
        assert line, "the stream ended"
        seen.append(line)
    stream.close()

    polled = {}
    poll = threading.Thread(target=lambda: polled.update(r=request(
        proxy, "GET", f"/v1/approvals/{aid}?wait=30", AGENT_KEY, ctx=ctx)))
    poll.start()
    time.sleep(0.3)
    status, _, body = request(proxy, "POST", f"/v1/approvals/{aid}/decision", OPERATOR_KEY,
                              {"decision": "approve", "reason": "behind caddy"}, ctx=ctx)
    assert status == 200, body
    poll.join(40)
    status, _, body = polled["r"]
    assert status == 200 and json.loads(body)["status"] == "approved", body
