//! Scope checks and session risk against arguments and records of unexpected shape, over the
//! HTTP API on either backend (found by review): a scope argument spelt in another case — which
//! a tool decoding case-insensitively (Go's `encoding/json`) reads as the named one — or of
//! another shape is held, not passed; an argument with more paths than are checked is held
//! without walking the filesystem for each; and a session mark written far in the future behind
//! the gateway's back holds that session's calls as unreadable instead of panicking the
//! proposal (and with it every proposal of its group commit).

use crate::backend::Param;
use crate::kit::{BOT, Gw, OP, assert_answer, policy, serve_policy};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Agent `bot` with the tools `read_path`, `read_files`, `fetch`, `browse` and `send_email`,
/// and the remote agent `payments` whose skill `pay` is approved over `order.amount`.
const AGENT: &str = "metadata: {id: bot}
action_space:
  local_tools:
    - alias: read_path
    - alias: read_files
    - alias: fetch
    - alias: browse
    - alias: send_email
    - alias: run_command
  remote_agents:
    - alias: payments
      allowed_skills:
        - id: pay
          approval: {condition: {args_match: {order.amount: {gt: 100}}}}
";

/// `read_path` (argument `path`) and `read_files` (the dotted arguments `files.path` and
/// `req.file.path`) are
/// scoped to `root`, `fetch` to `*.example.com`; `browse` brings untrusted output in,
/// `send_email` sends data out, `run_command` must name its `cwd` (`required`) inside `root`.
fn rules(root: &str) -> String {
    format!(
        "- tool: read_path
  scope: {{paths: {{arguments: [path], roots: [{root}]}}}}
- tool: read_files
  scope: {{paths: {{arguments: [files.path, req.file.path], roots: [{root}]}}}}
- tool: fetch
  scope: {{domains: {{arguments: [url], allow: [\"*.example.com\"]}}}}
- tool: browse
  untrusted_output: true
- tool: send_email
  egress: true
- tool: run_command
  scope: {{paths: {{arguments: [cwd], roots: [{root}], required: true}}}}
"
    )
}

/// A gateway with [`AGENT`] and [`rules`] over a temporary root; the gateway and the root.
async fn gateway() -> (Gw, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let gov = policy("t.scope-shapes-v1", &rules(root_path.to_str().unwrap()));
    (serve_policy(AGENT, &gov).await, root)
}

/// Asserts `tool(args)` in `session` is held (202) and returns the approval as an operator
/// reads it.
async fn held(gw: &Gw, session: &str, tool: &str, args: Value) -> Value {
    let (s, b) = gw.propose_in(session, tool, args.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{tool}({args}): {b}");
    let (s, a) = gw.approval(b["approval_id"].as_str().unwrap(), OP).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    a
}

/// Asserts `tool(args)` in `session` is allowed outright.
async fn allowed(gw: &Gw, session: &str, tool: &str, args: Value) {
    let (s, b) = gw.propose_in(session, tool, args).await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");
}

#[tokio::test]
async fn a_scope_argument_spelt_in_another_case_is_held_not_passed() {
    let (gw, root) = gateway().await;
    let inside = root.path().canonicalize().unwrap().join("a.txt");
    let inside = inside.to_str().unwrap();
    allowed(&gw, "s1", "read_path", json!({"path": inside})).await;
    allowed(
        &gw,
        "s1",
        "fetch",
        json!({"url": "https://docs.example.com/"}),
    )
    .await;

    let a = held(&gw, "s1", "read_path", json!({"PATH": "/etc/passwd"})).await;
    assert_eq!(a["triggers"], json!(["paths"]), "{a}");
    let why = a["reasons"].to_string();
    assert!(
        why.contains("`path` is missing") && why.contains("`PATH`"),
        "{a}"
    );

    let a = held(&gw, "s1", "fetch", json!({"URL": "https://evil.net/"})).await;
    assert_eq!(a["triggers"], json!(["domains"]), "{a}");
    assert!(a["reasons"].to_string().contains("`URL`"), "{a}");

    // A compatibility form too (full-width `ＰＡＴＨ` is `path` once NFKC-normalised and
    // lower-cased, as `canonical.rs` folds keys).
    let a = held(
        &gw,
        "s1",
        "read_path",
        json!({"\u{FF30}\u{FF21}\u{FF34}\u{FF28}": "/etc/passwd"}),
    )
    .await;
    assert_eq!(a["triggers"], json!(["paths"]), "{a}");
    gw.stop().await;
}

#[tokio::test]
async fn a_scope_argument_of_another_shape_is_held_not_passed() {
    let (gw, _root) = gateway().await;
    for v in [
        json!(null),
        json!(7),
        json!({"p": "/etc/passwd"}),
        json!(["/x", 1]),
    ] {
        let a = held(&gw, "s1", "read_path", json!({ "path": v })).await;
        assert_eq!(a["triggers"], json!(["paths"]), "{v}: {a}");
        let a = held(&gw, "s1", "fetch", json!({ "url": v })).await;
        assert_eq!(a["triggers"], json!(["domains"]), "{v}: {a}");
    }
    gw.stop().await;
}

/// Found by review: a literal key `req.path` showed the scope a path inside the root while
/// `{"Req": {"path": "/etc/shadow"}}`, which a case-insensitive tool reads as its `req.path`,
/// went unread. Refused as ambiguous, naming both spellings.
#[tokio::test]
async fn a_decoy_dotted_key_beside_a_nested_path_in_another_case_is_refused() {
    let (gw, _root) = gateway().await;
    let decoy = json!({"req.path": "/srv/data/ok", "Req": {"path": "/etc/shadow"}});
    let (s, b) = gw.propose_in("s1", "read_path", decoy).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let why = b.to_string();
    assert!(
        why.contains("`req.path`") && why.contains("`Req.path`"),
        "{b}"
    );
    gw.stop().await;
}

/// The same decoy in a delegation's `skill_args` (`{"order.amount": 5, "Order": {"amount":
/// 50000}}` against the skill's `order.amount > 100`) is refused too; found by review, its
/// `400` named `order.amount` and `Order.amount` as if they were the call's own arguments, so
/// whoever read it looked in the wrong object. It names them under `skill_args.`.
#[tokio::test]
async fn a_skill_argument_decoy_differing_in_case_is_refused_naming_it_under_skill_args() {
    let (gw, _root) = gateway().await;
    let decoy = json!({"order.amount": 5, "Order": {"amount": 50000}});
    let body = json!({"agent": "bot", "session_id": "d1", "target": "payments",
                      "skill_id": "pay", "skill_args": decoy});
    let (s, b) = gw.post("/v1/delegations", BOT, body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let why = b["message"].as_str().unwrap();
    assert!(
        why.contains("`skill_args.order.amount`") && why.contains("`skill_args.Order.amount`"),
        "{b}"
    );
    gw.stop().await;
}

/// Found by review: `scope.paths.arguments: [files.path]` against `files` sent as an array of
/// objects (or a string, or null) found no path and passed; the tool reads `/etc/shadow`.
#[tokio::test]
async fn a_dotted_scope_argument_stopping_at_an_array_or_plain_value_is_held() {
    let (gw, root) = gateway().await;
    let inside = root.path().canonicalize().unwrap().join("a.txt");
    let inside = inside.to_str().unwrap();
    allowed(&gw, "s1", "read_files", json!({"files": {"path": inside}})).await;
    for files in [
        json!([{"path": "/etc/shadow"}]),
        json!("/etc/shadow"),
        json!(null),
    ] {
        let a = held(&gw, "s1", "read_files", json!({ "files": files })).await;
        assert_eq!(a["triggers"], json!(["paths"]), "{files}: {a}");
        let why = a["reasons"].to_string();
        assert!(why.contains("`files.path` is missing"), "{files}: {a}");
    }
    gw.stop().await;
}

/// Found by review: `scope.paths.arguments: [req.file.path]` against `{"req": {"file.path":
/// "/etc/shadow"}}` (or `{"req.file": {"path": …}}`, a full-width dot, or `req.file` holding
/// an array or a string) found no path and passed, while a tool expanding dotted keys reads
/// `/etc/shadow` as `req.file.path`. Held, naming where.
#[tokio::test]
async fn a_scope_argument_behind_a_dotted_key_is_held_not_passed() {
    let (gw, root) = gateway().await;
    let inside = root.path().canonicalize().unwrap().join("a.txt");
    let inside = inside.to_str().unwrap();
    allowed(
        &gw,
        "s1",
        "read_files",
        json!({"req": {"file": {"path": inside}}}),
    )
    .await;
    for (args, at) in [
        (
            json!({"req": {"file.path": "/etc/shadow"}}),
            "/req/file.path",
        ),
        (
            json!({"req.file": {"path": "/etc/shadow"}}),
            "/req.file/path",
        ),
        (
            json!({"REQ": {"File.Path": "/etc/shadow"}}),
            "/REQ/File.Path",
        ),
        // A full-width dot is a dot to a reader normalising names (found by review).
        (
            json!({"req": {"file\u{ff0e}path": "/etc/shadow"}}),
            "/req/file\u{ff0e}path",
        ),
        // Stopped at what the rest of the path cannot enter, behind a dotted key.
        (json!({"req.file": [{"path": "/etc/shadow"}]}), "/req.file"),
        (json!({"req.file": "/etc/shadow"}), "/req.file"),
    ] {
        let a = held(&gw, "s1", "read_files", args.clone()).await;
        assert_eq!(a["triggers"], json!(["paths"]), "{args}: {a}");
        let why = a["reasons"].to_string();
        assert!(
            why.contains("tool expanding dotted keys") && why.contains(at),
            "{args}: {a}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn ten_thousand_paths_in_one_argument_are_held_naming_the_cap() {
    let (gw, root) = gateway().await;
    let inside = root.path().canonicalize().unwrap().join("a");
    let many = vec![inside.to_str().unwrap(); 10_000];
    let a = held(&gw, "s1", "read_path", json!({ "path": many })).await;
    assert_eq!(a["triggers"], json!(["paths"]), "{a}");
    assert!(
        a["reasons"]
            .to_string()
            .contains("too many paths to check (10000 > 64)"),
        "{a}"
    );
    let urls = vec!["https://a.example.com/"; 65];
    let a = held(&gw, "s1", "fetch", json!({ "url": urls })).await;
    assert!(
        a["reasons"]
            .to_string()
            .contains("too many URLs to check (65 > 64)"),
        "{a}"
    );
    // At the cap, every path is checked and one inside the root passes.
    allowed(&gw, "s1", "read_path", json!({ "path": &many[..64] })).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_session_mark_past_year_9999_holds_the_call_as_unreadable_not_a_panic() {
    let (gw, _root) = gateway().await;
    allowed(&gw, "far", "browse", json!({})).await;
    let n = gw.sql().exec(
        "UPDATE session_risk SET untrusted_at = ?1 WHERE agent = 'bot' AND session_id = 'far'",
        &[Param::from(i64::MAX)],
    );
    assert_eq!(n, 1);
    // The damaged session's call and another session's call, proposed together (one group
    // commit, when they land in one): the first is held, the second runs.
    let (far, other) = tokio::join!(
        gw.propose_in("far", "send_email", json!({"to": "x@example.com"})),
        gw.propose_in("clean", "send_email", json!({"to": "x@example.com"})),
    );
    assert_answer(other.0, &other.1, "decision", StatusCode::OK, "allow");
    assert_eq!(far.0, StatusCode::ACCEPTED, "{}", far.1);
    let (s, a) = gw
        .approval(far.1["approval_id"].as_str().unwrap(), OP)
        .await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["risk_tier"], "R4", "{a}");
    let triggers = a["triggers"].to_string();
    assert!(triggers.contains("session_unreadable"), "{a}");
    let why = a["reasons"].to_string();
    assert!(why.contains("risk record is unreadable"), "{a}");
    assert!(why.contains("untrusted_at = 9223372036854775807 ms"), "{a}");
    // A read-only call of the damaged session is held too: what it took in is unknown.
    let a = held(&gw, "far", "browse", json!({})).await;
    assert!(
        a["triggers"].to_string().contains("session_unreadable"),
        "{a}"
    );
    // The gateway still answers.
    allowed(&gw, "clean2", "send_email", json!({"to": "x@example.com"})).await;
    gw.stop().await;
}

/// Attack (found by review): a scope's argument left out passed, so `run_command` without
/// `cwd` ran in the tool's own default directory, outside the roots. A scope with
/// `required: true` holds such a call, naming the argument; one without checks only the
/// arguments present, as before.
#[tokio::test]
async fn a_required_scope_argument_left_out_is_held() {
    let (gw, root) = gateway().await;
    let a = held(
        &gw,
        "s1",
        "run_command",
        json!({"command": "cat ~/.ssh/id_rsa"}),
    )
    .await;
    assert_eq!(a["triggers"], json!(["paths"]), "{a}");
    assert!(
        a["reasons"]
            .to_string()
            .contains("`cwd` is missing (the rule requires it)"),
        "{a}"
    );
    // An empty list names no directory either (found by review of that fix).
    let a = held(
        &gw,
        "s1",
        "run_command",
        json!({"command": "ls", "cwd": []}),
    )
    .await;
    assert!(
        a["reasons"].to_string().contains("`cwd` holds no paths"),
        "{a}"
    );
    let inside = root.path().canonicalize().unwrap();
    let cwd = inside.to_str().unwrap();
    allowed(
        &gw,
        "s1",
        "run_command",
        json!({"command": "ls", "cwd": cwd}),
    )
    .await;
    allowed(&gw, "s1", "read_path", json!({})).await;
    gw.stop().await;
}
