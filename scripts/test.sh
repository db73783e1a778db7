#!/usr/bin/env bash
# Installs what the tests need on a fresh machine, then runs every test:
#   Rust unit and integration tests (real SQLite files, a throw-away Postgres cluster, the real
#   binary), formatting, the shape rules (scripts/shape.py) and clippy,
#   the end-to-end MCP tests (Python and TypeScript MCP SDK clients → assent mcp → npm
#   server-filesystem and server-everything, and a Python SDK server; the era matrix of issue
#   11; the MCP conformance suite's server scenarios through the proxy), and the dashboard in
#   Debian's Chromium (Playwright, axe-core).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's line carries the time it started (UTC), so a slow CI run shows where it went.
log() { printf '\n== %s  [%s]\n' "$*" "$(date -u +%T)"; }

need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v chromium >/dev/null 2>&1 || need+=(chromium)   # the dashboard's browser tests
command -v tmux >/dev/null 2>&1 || need+=(tmux)           # `assent watch` under tmux
command -v openssl >/dev/null 2>&1 || need+=(openssl)     # certificates for the PostgreSQL TLS tests
# webauthn-rs (passkeys) links OpenSSL: its headers and pkg-config (in the machine image, checked).
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# The store's tests start a throw-away Postgres cluster (initdb, pg_ctl) from Debian's
# postgresql, found under /usr/lib/postgresql/*/bin (ASSENT_TEST_NO_PG=1 skips that half).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v faketime >/dev/null 2>&1 || need+=(faketime)   # a replica with a skewed clock (tests/it/replica_configs.rs)
command -v caddy >/dev/null 2>&1 || need+=(caddy)         # the TLS reverse-proxy tests (tests/e2e/test_proxy_tls.py)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The npm and PyPI installs (3 minutes in CI, mostly the network) run beside the formatting,
# shape, clippy and build steps (the cores), and are waited for before any test runs: the
# verifier's tests need the .venv too (crates/assent-verify/tests/it/minted.rs).
log "installing the MCP servers, the TypeScript SDK client (npm) and the MCP Python SDK and pytest (PyPI, into .venv), in the background"
setup_log=$(mktemp)
(
  set -e
  (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/e2e/requirements.txt
) > "$setup_log" 2>&1 &
setup_pid=$!
setup_done() {
  local rc=0
  wait "$setup_pid" || rc=$?
  cat "$setup_log"
  [ "$rc" = 0 ] || { echo "installing the npm and PyPI packages failed (exit $rc)" >&2; exit 1; }
  log "the npm and PyPI packages are installed"
}

log "cargo fmt --check"
cargo fmt --all --check

log "the shape rules (scripts/shape.py: files, functions, import circles)"
python3 scripts/shape.py

log "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

log "cargo test: building every test"
# Every test binary, built once, as `crate_dir<TAB>executable` (its crate's directory
# relative to here, where cargo would run it), in cargo's order.
binaries=$(cargo test --locked --no-run --message-format=json | python3 -c '
import json, os, sys
root = os.getcwd()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        crate = os.path.relpath(os.path.dirname(m["manifest_path"]), root)
        print(crate + "\t" + m["executable"])
')
[ -n "$binaries" ] || { echo "cargo built no test binary" >&2; exit 1; }

# Each binary is run from its crate's directory, as `cargo test` runs it, six tests at a time:
# most suites wait on timers (keep-alives, graces, expiries), sockets and child processes far
# more than on the cores — at two tests at a time the server's behaviour suite kept 58% of the
# two cores busy and took 7 min 16 s; at six it takes 3 min 9 s. The CLI's suite, whose floods
# and size bounds do keep the cores busy, stands six at a time since the JSON and YAML
# dependencies are optimised in test builds (Cargo.toml: 294 s here, its ping floods at 24 s of
# their 120 s bound). `$1` is `RUST_TEST_THREADS`'s value, the rest the binaries' arguments.
run_binaries() {
  local threads=$1 dir exe; shift
  while IFS=$'\t' read -r dir exe; do
    printf '\n-- %s (%s), %s at a time  [%s]\n' "$dir" "${exe##*/}" "$threads" "$(date -u +%T)"
    # Not reading the list: a child process that inherits stdin must not eat the rest of it.
    (cd "$dir" && RUST_TEST_THREADS=$threads "$exe" "$@" < /dev/null)
  done <<< "$binaries"
}

# No doc tests: examples live in the integration tests (`cargo test --doc` alone took 2 min
# 25 s here to find none).
setup_done
log "cargo test"
run_binaries 6

# The server's behaviour suite again, every gateway on a schema of the throw-away PostgreSQL
# cluster instead of a SQLite file (the store's own suite already runs on both in one pass):
# the same binary, from its crate's directory.
if [ "${ASSENT_TEST_NO_PG:-}" != 1 ]; then
  log "cargo test: the server's behaviour suite on PostgreSQL"
  server_it=$(printf '%s\n' "$binaries" | awk -F'\t' '$1 == "crates/assent-server" && $2 ~ /\/it-[0-9a-f]+$/ {print $2}')
  [ -n "$server_it" ] || { echo "the server's test binary was not found" >&2; exit 1; }
  (cd crates/assent-server && ASSENT_TEST_BACKEND=postgres RUST_TEST_THREADS=6 "$server_it")
fi

log "end-to-end MCP tests"
# `cargo test` built target/debug/assent for the binary's integration tests; building it again
# without the dev-dependencies' features would recompile much of the tree for nothing.
[ -x target/debug/assent ] || cargo build --locked -p assent
# Two workers, each file's tests on one (its module fixtures shared): most of the time is spent
# waiting on gateways, MCP servers, Node clients and the browser, not on the two cores.
ASSENT_BIN="$PWD/target/debug/assent" .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=15 tests/e2e
log "every test passed"
