//! Start-up refusals through the real binary: a bad config stops `serve` naming the file, the
//! line and the reason (principals, unset keys, MCP upstreams, webhooks, audit checkpoints),
//! and unknown agent-file fields warn, or stop `check` and `serve` when strict; what they
//! quote from a file reaches the terminal escaped; principal names the gateway keeps for its
//! own actors and guessable keys are refused; YAML alias bombs, deep nesting and non-finite
//! numbers are refused quickly.

use crate::{BIN, serve_cmd};
use std::path::Path;
use std::process::Command;

/// Writes `cfg` to the config file `p`, runs `assent serve` on it (without the environment
/// variable `unset`, when given) to its end, and returns its exit code and stderr.
fn serve_on(p: &Path, cfg: &str, unset: Option<&str>) -> (Option<i32>, String) {
    std::fs::write(p, cfg).unwrap();
    let mut cmd = serve_cmd(p);
    if let Some(var) = unset {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

#[test]
fn a_bad_config_stops_start_up_with_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    let cfg = "listen: 127.0.0.1:0\nprincipals:\n  - {name: a, kind: wizard, key_env: X}\n";
    let (code, err) = serve_on(&p, cfg, None);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("{}:3:", p.display())) && err.contains("unknown kind `wizard`"),
        "{err}"
    );
    let (code, err) = serve_on(&p, "listen: 127.0.0.1:0\nlisten_typo: 1\n", None);
    assert!(
        code == Some(1) && err.contains(":2: unknown field `listen_typo`"),
        "{err}"
    );
    // The file and line are said once, and the YAML parser's advice to its caller not at all.
    let (code, err) = serve_on(&p, "listen: 127.0.0.1:0\nlisten: 127.0.0.1:1\n", None);
    assert!(
        code == Some(1)
            && err.contains(":2: duplicate mapping key: listen (column 1)")
            && !err.contains("error: line")
            && !err.contains("DuplicateKeyPolicy"),
        "{err}"
    );
    // key_env that is not set.
    let cfg = "listen: 127.0.0.1:0\nprincipals:\n  - {name: a, kind: operator, key_env: ASSENT_TEST_UNSET_VAR}\n";
    let (code, err) = serve_on(&p, cfg, Some("ASSENT_TEST_UNSET_VAR"));
    assert!(
        code == Some(1) && err.contains("ASSENT_TEST_UNSET_VAR") && err.contains(":3:"),
        "{err}"
    );
    // `owns` names agent ids (issue 14 §2): an empty one is refused with the line.
    let cfg = "listen: 127.0.0.1:0\nprincipals:\n  - {name: o, kind: operator, key_env: X, owns: [\"\"]}\n";
    let (code, err) = serve_on(&p, cfg, None);
    assert!(
        code == Some(1) && err.contains(":3:") && err.contains("owns `` is not an agent id"),
        "{err}"
    );
    // An `owns` that differs from a declared agent id only in case or `-`/`_` (a typo) would
    // leave separation of duties off for the agent meant: refused with the line (found by
    // review: only logged).
    std::fs::write(
        dir.path().join("bot.agf.yaml"),
        "metadata: {id: treasury_bot}\n",
    )
    .unwrap();
    let cfg = format!(
        "listen: 127.0.0.1:0\nagents: [bot.agf.yaml]\nprincipals:\n  - {{name: o, kind: operator, key_sha256: \"{}\", owns: [treasury-bot]}}\n",
        "ab".repeat(32)
    );
    let (code, err) = serve_on(&p, &cfg, None);
    assert!(
        code == Some(1)
            && err.contains(":4:")
            && err.contains("`treasury_bot` is declared (a typo?)"),
        "{err}"
    );
    // MCP upstreams: each mistake names the alias and the line.
    for (cfg, why) in [
        (
            "mcp_upstreams:\n  fs: {url: \"ftp://x\"}\n",
            "not an http(s) URL",
        ),
        (
            "mcp_upstreams:\n  fs: {command: [a], url: \"http://x\"}\n",
            "not both",
        ),
        ("mcp_upstreams:\n  fs: {}\n", "give `command`"),
        (
            "mcp_upstreams:\n  bad-alias: {command: [a]}\n",
            "must match",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"ftp://x\", secret_env: S}\n",
            "webhooks `ops`: url `ftp://x` is not an http(s) URL",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"http://x\", secret_env: S, events: [approval.created]}\n",
            "event `approval.created`",
        ),
        (
            "webhooks:\n  - {name: ops, url: \"http://x\", secret_env: S, format: teams}\n",
            "format `teams`",
        ),
        (
            "audit_checkpoints:\n  every_records: 0\n",
            "audit_checkpoints.every_records 0: use 1 to 1000000",
        ),
        (
            "audit_checkpoints:\n  every_seconds: 100000\n",
            "audit_checkpoints.every_seconds 100000: use 1 to 86400",
        ),
        (
            "audit_checkpoints:\n  file: /nonexistent/dir/checkpoints.jsonl\n",
            "not a file in an existing directory",
        ),
        // Found by review: these named the file but not the line.
        (
            "trusted_proxies:\n  - 10.0.0.0/8\n",
            "trusted_proxies: `10.0.0.0/8` is not an IP address",
        ),
        (
            "public_url:\n  ftp://x\n",
            "public_url `ftp://x` is not an http(s) URL",
        ),
        (
            "public_url:\n  \"https://a.example/x?y=1\"\n",
            "without a query or fragment",
        ),
        (
            "agents:\n  - agents/missing.agf.yaml\n",
            "agents file `agents/missing.agf.yaml` does not exist",
        ),
        (
            "governance:\n  - none.yaml\n",
            "governance file `none.yaml` does not exist",
        ),
        // Attack (fail open): a governance glob that matches nothing — a mount moved, a
        // directory emptied — started the gateway with a warning and without the
        // organisation's denials.
        (
            "governance:\n  - \"policies/*.yaml\"\n",
            "governance glob `policies/*.yaml` matches no file",
        ),
    ] {
        let (code, err) = serve_on(&p, &format!("listen: 127.0.0.1:0\n{cfg}"), None);
        assert!(
            code == Some(1) && err.contains(":3:") && err.contains(why),
            "{cfg}: {err}"
        );
    }
    // A webhook secret that is not set: start-up stops naming the variable.
    let cfg = "listen: 127.0.0.1:0\nwebhooks:\n  - {name: ops, url: \"http://127.0.0.1:9/h\", secret_env: ASSENT_TEST_UNSET_SECRET}\n";
    let (code, err) = serve_on(&p, cfg, Some("ASSENT_TEST_UNSET_SECRET"));
    assert!(
        code == Some(1)
            && err.contains(":3: webhooks `ops`: environment variable ASSENT_TEST_UNSET_SECRET (secret_env) is not set"),
        "{err}"
    );
    // The metrics scrape key (issue 15 §2): unset, or too short to resist guessing.
    let cfg = "listen: 127.0.0.1:0\nmetrics_key_env: ASSENT_TEST_UNSET_METRICS\n";
    let (code, err) = serve_on(&p, cfg, Some("ASSENT_TEST_UNSET_METRICS"));
    assert!(
        code == Some(1)
            && err.contains(
                ":2: metrics_key_env: environment variable ASSENT_TEST_UNSET_METRICS is not set"
            ),
        "{err}"
    );
    let cfg = "listen: 127.0.0.1:0\nmetrics_key_env: ASSENT_TEST_SHORT_METRICS\n";
    std::fs::write(&p, cfg).unwrap();
    // Found by review: only the length was checked, so 32 spaces or one character 40 times
    // passed.
    for (key, why) in [
        ("guessable".to_string(), "is 9 characters; use at least 32"),
        (" ".repeat(40), "has whitespace"),
        ("z".repeat(40), "has fewer than 8 distinct characters"),
    ] {
        let out = serve_cmd(&p)
            .env("ASSENT_TEST_SHORT_METRICS", &key)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(1)
                && err.contains(&format!("the key in ASSENT_TEST_SHORT_METRICS {why}")),
            "{key:?}: {err}"
        );
    }
    // Attack: the scrape key is an operator's key, which then also passes the throttle as a
    // scrape key would; start-up refuses the pair.
    let cfg = "listen: 127.0.0.1:0\nmetrics_key_env: ASSENT_TEST_SHARED_KEY\nprincipals:\n  - {name: a, kind: operator, key_env: ASSENT_TEST_SHARED_KEY}\n";
    std::fs::write(&p, cfg).unwrap();
    let out = serve_cmd(&p)
        .env(
            "ASSENT_TEST_SHARED_KEY",
            "shared-key-0123456789abcdef0123456789",
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("is also a principal's key"),
        "{err}"
    );
    assert!(
        !dir.path().join(".assent").exists(),
        "nothing is created when the config is bad"
    );
}

#[test]
fn unknown_agent_file_fields_warn_and_strict_makes_them_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("typo.agf.yaml"),
        "schema_version: \"1.0.0\"\nmetadata: {id: typo_bot}\naction_space:\n  local_tools:\n    - alias: pay\n      aproval: true\n",
    )
    .unwrap();
    let cfg = dir.path().join("assent.yaml");
    std::fs::write(&cfg, "agents: [\"typo.agf.yaml\"]\n").unwrap();
    let run = |strict: bool| {
        let mut c = Command::new(BIN);
        c.args(["check", "--config"])
            .arg(&cfg)
            .args(["--agent", "typo_bot", "--tool", "pay"]);
        if strict {
            c.arg("--strict");
        }
        c.output().unwrap()
    };
    let out = run(false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the typo is ignored: {err}");
    assert!(
        err.contains("typo.agf.yaml:6: unknown field `action_space.local_tools[0].aproval`"),
        "{err}"
    );
    let out = run(true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("typo.agf.yaml:6") && err.contains("aproval"),
        "{err}"
    );
    // The same through the config file key, for `serve`.
    let strict = "agents: [\"typo.agf.yaml\"]\nstrict_agent_files: true\n";
    let (code, err) = serve_on(&cfg, strict, None);
    assert_eq!(code, Some(1));
    assert!(err.contains("aproval"));
}

/// Attack (found by review): start-up problem lines and warnings quoted ids and field names
/// from agent files as they were, so a file written by another team put escape sequences
/// (`\e[2J` clears the screen, `\e]0;…\a` retitles the window) and line breaks — a forged
/// problem line of its own — into the operator's terminal through `assent check` (its
/// errors and warnings were printed as they were) and `assent serve`. They now arrive as
/// visible `\uXXXX` escapes, each problem on one line.
#[test]
fn an_escape_sequence_in_an_agent_file_reaches_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("evil.agf.yaml");
    let cfg = dir.path().join("assent.yaml");
    let check = || {
        let out = crate::check_bot_pay(&cfg);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    std::fs::write(
        &agent,
        "metadata:\n  id: \"evil\\e[2J\\nassent.yaml:1: all good\"\naction_space:\n  local_tools: [{alias: pay, approval: true}]\n",
    )
    .unwrap();
    let quoted = r"evil.agf.yaml:2: metadata.id `evil\u001b[2J\u000aassent.yaml:1: all good`";
    let (code, err) = serve_on(&cfg, "listen: 127.0.0.1:0\nagents: [evil.agf.yaml]\n", None);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(quoted) && !err.contains('\u{1b}'), "{err:?}");
    let (code, err) = check();
    assert!(
        code == Some(2)
            && err.contains(quoted)
            && !err.contains('\u{1b}')
            && !err.lines().any(|l| l.starts_with("assent.yaml:1:")),
        "{err:?}"
    );
    // A warning quoting a field name (an unknown Agent Format field) is escaped the same way.
    std::fs::write(
        &agent,
        "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, \"x\\e]0;pwned\\a\": 1}\n",
    )
    .unwrap();
    let (code, err) = check();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(r"x\u001b]0;pwned\u0007") && !err.contains(['\u{1b}', '\u{7}']),
        "{err:?}"
    );
}

/// A config whose only principal is `name` (written as a YAML double-quoted string), at line 3.
fn named(name: &str) -> String {
    let hash = "ab".repeat(32);
    format!(
        "listen: 127.0.0.1:0\nagents: [bot.agf.yaml]\nprincipals: [{{name: \"{name}\", kind: operator, key_sha256: \"{hash}\"}}]\n"
    )
}

/// Found by review: any principal name loaded, so one named `system:expiry`, `user-of:BOT`
/// (an agent's user in the client), `oidc:NAME` (a linked SSO session) or `grant:ID` was
/// mixed up with the gateway's own actors in audit records and when consent is withdrawn;
/// an empty name, or one with an invisible character, looked like another. Each stops
/// `assent check` (2) and `assent serve` (1) naming the file, the line and why.
#[test]
fn a_principal_name_that_is_empty_invisible_or_reserved_stops_check_and_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    std::fs::write(
        dir.path().join("bot.agf.yaml"),
        "metadata: {id: bot}\naction_space:\n  local_tools: [{alias: pay, approval: true}]\n",
    )
    .unwrap();
    let long = "a".repeat(257);
    for (name, why) in [
        ("", "its name is not 1 to 256 bytes"),
        (&long, "its name is not 1 to 256 bytes"),
        (
            r"ali\u200bce",
            "its name has a control or invisible character (U+200B at byte 3)",
        ),
        (
            r"bob\t",
            "its name has a control or invisible character (U+0009 at byte 3)",
        ),
        (
            r"eve\u202e",
            "its name has a control or invisible character (U+202E at byte 3)",
        ),
        ("system:expiry", "its name starts with `system:`"),
        ("SYSTEM:sighup", "its name starts with `system:`"),
        ("user-of:treasury_bot", "its name starts with `user-of:`"),
        ("oidc:bob", "its name starts with `oidc:`"),
        ("Oidc:bob", "its name starts with `oidc:`"),
        ("grant:0123", "its name starts with `grant:`"),
    ] {
        // `check` first: a `serve` that accepted the name would run on.
        std::fs::write(&p, named(name)).unwrap();
        let out = crate::check_bot_pay(&p);
        let err = String::from_utf8_lossy(&out.stderr);
        let at = format!("{}:3: principal `", p.display());
        assert!(
            out.status.code() == Some(2) && err.contains(&at) && err.contains(why),
            "{name}: {err}"
        );
        let (code, err) = serve_on(&p, &named(name), None);
        assert!(
            code == Some(1) && err.contains(&at) && err.contains(why),
            "{name}: {err}"
        );
    }
    // Names near those still load (`pay` needs approval: exit status 10).
    for name in [
        "alice",
        "Ops Team",
        "system-admin",
        "oidc-bridge",
        "grants",
        "andr\u{e9}",
    ] {
        std::fs::write(&p, named(name)).unwrap();
        let out = crate::check_bot_pay(&p);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(10), "{name}: {err}");
    }
}

/// Found by review: a `key_env` key was checked by its length only, so 32 spaces or one
/// character 40 times passed. Whitespace stops start-up always (a pasted line break); fewer
/// than 8 distinct characters unless `--insecure-demo-keys`. The error names the variable,
/// never the key. A random key passes (shown by the next principal's shared-key error).
#[test]
fn a_key_of_whitespace_or_few_distinct_characters_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    let cfg = "listen: 127.0.0.1:0\nprincipals:\n  - {name: a, kind: operator, key_env: ASSENT_TEST_WEAK_KEY}\n  - {name: b, kind: operator, key_env: ASSENT_TEST_WEAK_KEY}\n";
    std::fs::write(&p, cfg).unwrap();
    let run = |key: &str, demo: bool| {
        let mut c = serve_cmd(&p);
        if demo {
            c.arg("--insecure-demo-keys");
        }
        let out = c.env("ASSENT_TEST_WEAK_KEY", key).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    let space = "has whitespace";
    let few = "fewer than 8 distinct characters";
    let passes = "principal `b` has the same key as `a`";
    let hex = "9f3c0a7be21d4856f0c3a9e7b1d2486c5e0f9a3b7c1d2e4f6a8b0c2d4e6f8a0b";
    for (key, demo, why) in [
        (" ".repeat(40), false, space),
        (format!("{hex}\n"), false, space),
        (format!("{} {}", &hex[..20], &hex[20..]), false, space),
        ("\tk3y-for-demo".into(), true, space),
        ("z".repeat(40), false, few),
        ("0123456".repeat(6), false, few),
        // Long and varied enough: the first principal's key passes.
        (hex.into(), false, passes),
        ("0123456".repeat(6) + "7", false, passes),
        // A demo key need be neither long nor varied.
        ("zz".into(), true, passes),
    ] {
        let (code, err) = run(&key, demo);
        assert!(
            code == Some(1) && err.contains(&format!("{}:", p.display())) && err.contains(why),
            "{key:?}: {err}"
        );
        if why == passes {
            continue;
        }
        assert!(
            err.contains(":3: principal `a`: the key in ASSENT_TEST_WEAK_KEY (key_env)")
                && !err.contains(&key[1..key.len() - 1]),
            "the variable is named, the key never shown: {err}"
        );
    }
}

/// Found by review: a webhook's secret was checked by its length only and Slack's signing
/// secret not at all, so 32 spaces, one character 40 times or a pasted line break loaded, and
/// with it every signature the receiver (or assent, for Slack's) checks could be guessed or
/// never matched. Each stops start-up naming the webhook or `slack` and the variable, never
/// the secret; `--insecure-demo-keys` lifts none of it. A random secret passes (the error is
/// then the other's).
#[test]
fn a_weak_webhook_or_slack_signing_secret_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    let cfg = "listen: 127.0.0.1:0\nwebhooks:\n  - {name: ops, url: \"http://127.0.0.1:9/h\", secret_env: ASSENT_TEST_HOOK}\nslack:\n  signing_secret_env: ASSENT_TEST_SIGNING\n";
    std::fs::write(&p, cfg).unwrap();
    let hex = "8f742231b10e4c6fa9d3e5b7c1a2f4e6";
    let run = |hook: &str, signing: &str| {
        let out = serve_cmd(&p)
            .arg("--insecure-demo-keys")
            .env("ASSENT_TEST_HOOK", hook)
            .env("ASSENT_TEST_SIGNING", signing)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let hook = ":3: webhooks `ops`: the secret in ASSENT_TEST_HOOK (secret_env)";
    let slack = "slack: the signing secret in ASSENT_TEST_SIGNING (signing_secret_env)";
    for (weak, why) in [
        (" ".repeat(40), "has whitespace"),
        (format!("{hex}\n"), "has whitespace"),
        ("z".repeat(40), "has fewer than 8 distinct characters"),
        ("0123456".repeat(6), "has fewer than 8 distinct characters"),
        ("k3y".into(), "is 3 characters; use at least 32"),
    ] {
        let err = run(&weak, hex);
        assert!(
            err.contains(&format!("{hook} {why}")) && !err.contains("signing secret"),
            "{weak:?}: {err}"
        );
        let err = run(hex, &weak);
        assert!(
            err.contains(&format!("{slack} {why}")) && !err.contains("webhooks `ops`"),
            "{weak:?}: {err}"
        );
        if weak.trim().len() > 3 {
            assert!(
                !err.contains(weak.trim()),
                "the secret is never shown: {err}"
            );
        }
    }
}

/// The YAML limits that protect loading (serde-saphyr's budget): an alias bomb (a billion
/// nodes if expanded), thousands of nested levels and a non-finite number, in the config
/// and in an agent file, each stop `assent check` with exit 2 and an error at the line, in
/// a few seconds, nothing panicking.
#[test]
fn yaml_bombs_deep_nesting_and_non_finite_numbers_are_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("assent.yaml");
    let agent = dir.path().join("bot.agf.yaml");
    // Nine levels of ten aliases each: 10^9 nodes if expanded, past the 250,000-node budget.
    let mut bomb = String::from("  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("  - &a{i} [{refs}]\n"));
    }
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let pay = "action_space:\n  local_tools:\n    - alias: pay\n      approval: {condition: {args_match: {amount: {gt: ";
    let agents = "agents: [bot.agf.yaml]\n";
    let bot = "metadata: {id: bot}\n";
    let with_pay = |n: &str| Some(format!("{bot}{pay}{n}}}}}}}}}\n"));
    for (config, agent_file, said) in [
        (format!("governance:\n{bomb}"), None, "assent.yaml:2:"),
        (
            agents.into(),
            Some(format!("{bot}x-lol:\n{bomb}")),
            "bot.agf.yaml:8: budget breached",
        ),
        (
            format!("agents: {deep}\n"),
            None,
            "assent.yaml:1: recursion limit exceeded",
        ),
        (
            agents.into(),
            Some(format!("{bot}x-deep: {deep}\n")),
            "bot.agf.yaml:2: recursion limit exceeded",
        ),
        (
            "approval_timeout_seconds: .nan\n".into(),
            None,
            "assent.yaml:1:",
        ),
        (
            agents.into(),
            with_pay(".nan"),
            "bot.agf.yaml:5: non-finite float `.nan`",
        ),
        (
            agents.into(),
            with_pay("-.inf"),
            "bot.agf.yaml:5: non-finite float `-.inf`",
        ),
        (
            agents.into(),
            with_pay("1e999"),
            "bot.agf.yaml:5: non-finite float `1e999`",
        ),
    ] {
        std::fs::write(&cfg, &config).unwrap();
        if let Some(text) = &agent_file {
            std::fs::write(&agent, text).unwrap();
        }
        let start = std::time::Instant::now();
        let out = crate::check_bot_pay(&cfg);
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(2) && err.contains(said) && !err.contains("panicked"),
            "{config} {agent_file:?}: {err}"
        );
        assert!(
            took < std::time::Duration::from_secs(10),
            "{said}: {took:?}"
        );
    }
}
