//! Seed 002 decision options, grants, triggers, timeouts, batching, cancelling and the
//! ApprovalRequest / Token / MPLP Confirm shapes, against a real server and SQLite file.

use super::schemas::{assert_valid, validator};
use super::{Gw, Settings, start_reg};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const AGENTS: &str = r#"
metadata: {id: bot, name: Bot}
action_space:
  local_tools:
    - {alias: send, approval: true}
    - alias: deploy
    - alias: transfer
    - alias: search
    - alias: read_path
    - alias: fetch
    - {alias: wipe, approval: true}
    - {alias: esc, approval: true}
    - {alias: low, approval: true}
"#;

fn gov(root: &Path) -> String {
    format!(
        r#"
policies:
  - id: acme.proto.rules-v1
    selector: {{agents: ["*"]}}
    rules:
      - tool: deploy
        risk_tier: R3
        suggested_alternatives: ["deploy to staging first"]
      - tool: transfer
        thresholds: {{cost: {{argument: amount, max_per_session: 100}}}}
      - tool: search
        thresholds: {{rate: {{max: 2, per_seconds: 60}}}}
      - tool: read_path
        scope: {{paths: {{arguments: [path], roots: ["{root}"]}}}}
      - tool: fetch
        scope: {{domains: {{arguments: [url], allow: ["*.example.com", "example.com"]}}}}
      - tool: wipe
        deny: {{condition: {{args_match: {{target: "/"}}}}, message_template: "never wipe {{{{tool_args.target}}}}"}}
      - tool: esc
        approvers: [finance]
        timeout_seconds: 1
        on_timeout: {{escalate_to: [ops], after_seconds: 30}}
      - tool: low
        risk_tier: R1
"#,
        root = root.display()
    )
}

struct Env {
    gw: Gw,
    root: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

async fn env_with(settings: Settings) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(root.path()).unwrap();
    let gw = start_reg(dir.path(), 300_000, settings, AGENTS, &gov(&real)).await;
    Env {
        gw,
        root,
        _dir: dir,
    }
}

async fn env() -> Env {
    env_with(Settings::default()).await
}

impl Gw {
    async fn call(
        &self,
        session: &str,
        tool: &str,
        args: Value,
        extra: Value,
    ) -> (StatusCode, Value) {
        let mut body =
            json!({"agent": "bot", "session_id": session, "tool": tool, "arguments": args});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        self.req("POST", "/v1/tool-calls", Some("bot-key"), Some(body))
            .await
    }
    async fn held(&self, session: &str, tool: &str, args: Value) -> String {
        let (s, b) = self.call(session, tool, args, json!({})).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        b["approval_id"].as_str().unwrap().to_string()
    }
    async fn decide_with(&self, id: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some(key),
            Some(body),
        )
        .await
    }
    /// The approval as its agent sees it (with the token once approved).
    async fn as_agent(&self, id: &str) -> Value {
        let (s, b) = self
            .req("GET", &format!("/v1/approvals/{id}"), Some("bot-key"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{b}");
        b
    }
    async fn redeem(
        &self,
        token: &str,
        tool: &str,
        args: Value,
        device: Option<&str>,
    ) -> (StatusCode, Value) {
        self.req(
            "POST",
            "/v1/tokens/redeem",
            Some("bot-key"),
            Some(json!({"token": token, "tool": tool, "arguments": args, "device_id": device})),
        )
        .await
    }
}

fn token_of(v: &Value) -> String {
    v["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {v}"))
        .to_string()
}

#[tokio::test]
async fn session_grant_covers_the_same_call_in_the_same_session_until_revoked() {
    let e = env().await;
    let gw = &e.gw;
    let token_schema = validator("docs/schemas/approval-token.schema.json");
    let id = gw.held("s1", "send", json!({"to": "ops", "n": 1})).await;
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "scope": "session"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (b["scope"].as_str(), b["grant_id"].is_string()),
        (Some("session"), true)
    );
    let rec = gw.as_agent(&id).await;
    assert_eq!(rec["scope"], "session");
    assert_valid(
        &token_schema,
        &rec["approval_token"],
        "token of a session approval",
    );
    assert_eq!(rec["approval_token"]["scope"], "session");
    let (s, _) = gw
        .redeem(&token_of(&rec), "send", json!({"to": "ops", "n": 1}), None)
        .await;
    assert_eq!(s, StatusCode::OK);

    // The same call again in the same session: allowed by the grant, with its own token.
    let (s, b) = gw
        .call("s1", "send", json!({"n": 1, "to": "ops"}), json!({}))
        .await;
    assert_eq!(
        (s, b["decision"].as_str()),
        (StatusCode::OK, Some("allow")),
        "{b}"
    );
    assert_eq!(b["grant_id"], rec["grant_id"]);
    assert_ne!(b["approval_id"], json!(id));
    assert_valid(
        &token_schema,
        &b["approval_token"],
        "token of a granted call",
    );
    let t = token_of(&b);
    assert_eq!(
        gw.redeem(&t, "send", json!({"to": "ops", "n": 1}), None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        gw.redeem(&t, "send", json!({"to": "ops", "n": 1}), None)
            .await
            .0,
        StatusCode::CONFLICT
    );

    // Another session, or other arguments: not covered.
    assert_eq!(
        gw.call("s2", "send", json!({"to": "ops", "n": 1}), json!({}))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        gw.call("s1", "send", json!({"to": "ops", "n": 2}), json!({}))
            .await
            .0,
        StatusCode::ACCEPTED
    );

    // Listed, then revoked: the same call is held again.
    let (_, g) = gw.req("GET", "/v1/grants", Some("alice-key"), None).await;
    let grants = g["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 1, "{g}");
    let gid = grants[0]["id"].as_str().unwrap();
    assert_eq!(grants[0]["whole_tool"], false);
    assert_eq!(
        gw.req("GET", "/v1/grants", Some("bot-key"), None).await.0,
        StatusCode::FORBIDDEN
    );
    let (s, _) = gw
        .req(
            "DELETE",
            &format!("/v1/grants/{gid}"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(
        gw.req(
            "DELETE",
            &format!("/v1/grants/{gid}"),
            Some("alice-key"),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        gw.call("s1", "send", json!({"to": "ops", "n": 1}), json!({}))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    let (_, g) = gw.req("GET", "/v1/grants", Some("alice-key"), None).await;
    assert_eq!(g["grants"].as_array().unwrap().len(), 0);
    let (_, g) = gw
        .req("GET", "/v1/grants?all=true", Some("alice-key"), None)
        .await;
    assert_eq!(g["grants"][0]["revoked_by"], "alice");
}

#[tokio::test]
async fn duration_grant_widened_to_the_tool_lapses_and_workspace_needs_confirmation_on_r3() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw.held("s1", "send", json!({"n": 1})).await;
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "scope": "2s", "whole_tool": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // Other arguments, other session: covered while the grant lasts.
    let (s, b) = gw.call("s9", "send", json!({"n": 7}), json!({})).await;
    assert_eq!(
        (s, b["scope"].as_str()),
        (StatusCode::OK, Some("2s")),
        "{b}"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        gw.call("s9", "send", json!({"n": 8}), json!({})).await.0,
        StatusCode::ACCEPTED
    );

    // workspace on an R3 tool: refused without the explicit flag, and nothing changes.
    let id = gw.held("s1", "deploy", json!({"env": "prod"})).await;
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "scope": "workspace"}),
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("WORKSPACE_NEEDS_CONFIRMATION")
        ),
        "{b}"
    );
    assert_eq!(gw.as_agent(&id).await["status"], "pending");
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "scope": "workspace", "confirm_workspace": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, g) = gw.req("GET", "/v1/grants", Some("alice-key"), None).await;
    let g = g["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["tool"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(
        (g["discouraged"].as_bool(), g["scope"].as_str()),
        (Some(true), Some("workspace"))
    );
    let (s, _) = gw
        .call("s5", "deploy", json!({"env": "prod"}), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK);
    // Bad scopes are a 400.
    let id = gw.held("s1", "send", json!({"n": 3})).await;
    for scope in ["forever", "0m", "15x", "400d"] {
        let (s, b) = gw
            .decide_with(
                &id,
                "alice-key",
                json!({"decision": "approve", "scope": scope}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{scope}: {b}");
    }
    let (s, _) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "deny", "scope": "session"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn approve_with_modifications_binds_the_edited_call_and_audits_both() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw
        .held("s1", "send", json!({"to": "everyone", "n": 1}))
        .await;
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "arguments": {"to": "team", "n": 1}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let rec = gw.as_agent(&id).await;
    assert_eq!(
        (rec["arguments_changed"].as_bool(), &rec["arguments"]),
        (Some(true), &json!({"to": "team", "n": 1}))
    );
    assert_eq!(
        rec["diff"],
        json!([{"op": "replace", "path": "/to", "value": "team"}])
    );
    let t = token_of(&rec);
    let (s, b) = gw
        .redeem(&t, "send", json!({"to": "everyone", "n": 1}), None)
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("TOKEN_MISMATCH"))
    );
    assert_eq!(
        gw.redeem(&t, "send", json!({"n": 1, "to": "team"}), None)
            .await
            .0,
        StatusCode::OK
    );
    let (_, ar) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id}?format=approval-request"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_valid(
        &validator("docs/schemas/approval-request.schema.json"),
        &ar,
        "edited ApprovalRequest",
    );
    assert_eq!(ar["diff"][0]["path"], "/to");

    // An edit the policy denies is refused and the approval stays pending.
    let id = gw.held("s1", "wipe", json!({"target": "/tmp/x"})).await;
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "arguments": {"target": "/"}}),
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("EDIT_DENIED")),
        "{b}"
    );
    assert!(
        b["message"].as_str().unwrap().contains("never wipe /"),
        "{b}"
    );
    assert_eq!(gw.as_agent(&id).await["status"], "pending");
    // The unedited call is denied outright.
    let (s, b) = gw
        .call("s1", "wipe", json!({"target": "/"}), json!({}))
        .await;
    assert_eq!(
        (s, b["reason"].as_str()),
        (StatusCode::FORBIDDEN, Some("never wipe /"))
    );
    // An edit that widens a path beyond the roots is refused too.
    let inside = e.root.path().join("a.txt");
    let id = gw
        .held("s1", "read_path", json!({"path": "relative.txt"}))
        .await;
    let (s, b) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "arguments": {"path": "/etc/passwd"}}),
        )
        .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("EDIT_OUT_OF_SCOPE")),
        "{b}"
    );
    let (s, _) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "approve", "arguments": {"path": inside}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);

    gw.state.store.verify_audit().unwrap();
    let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
    let data: String = db
        .query_row("SELECT data FROM audit WHERE kind = 'decision' AND data LIKE '%modified_call%' ORDER BY seq LIMIT 1", [], |r| r.get(0))
        .unwrap();
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["original_call"]["arguments"]["to"], "everyone");
    assert_eq!(data["modified_call"]["arguments"]["to"], "team");
    assert_ne!(
        data["original_call"]["call_hash"],
        data["modified_call"]["call_hash"]
    );
}

#[tokio::test]
async fn a_deny_reason_reaches_the_agent() {
    let e = env().await;
    let gw = &e.gw;
    let id = gw.held("s1", "send", json!({"n": 1})).await;
    let (s, _) = gw
        .decide_with(
            &id,
            "alice-key",
            json!({"decision": "deny", "reason": "use the staging queue"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let rec = gw.as_agent(&id).await;
    assert_eq!(rec["code"], "TOOL_DENIED");
    assert!(
        rec["reason"]
            .as_str()
            .unwrap()
            .contains("use the staging queue"),
        "{rec}"
    );
    assert!(rec.get("token").is_none());
}

#[tokio::test]
async fn cost_and_rate_thresholds_hold_the_call_that_exceeds_them_and_grants_do_not_bypass() {
    let e = env().await;
    let gw = &e.gw;
    for amount in [60, 30] {
        assert_eq!(
            gw.call("s1", "transfer", json!({"amount": amount}), json!({}))
                .await
                .0,
            StatusCode::OK
        );
    }
    let (s, b) = gw
        .call("s1", "transfer", json!({"amount": 20}), json!({}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["triggers"], json!(["cost"]));
    let why = b["reasons"].to_string();
    assert!(
        why.contains("cost threshold exceeded") && why.contains("totals 110"),
        "{why}"
    );
    // Another session has its own total; a missing amount cannot be checked.
    assert_eq!(
        gw.call("s2", "transfer", json!({"amount": 20}), json!({}))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        gw.call("s2", "transfer", json!({"to": "x"}), json!({}))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    // A session grant on a threshold-held call does not let the next one through.
    let id = b["approval_id"].as_str().unwrap();
    let (s, _) = gw
        .decide_with(
            id,
            "alice-key",
            json!({"decision": "approve", "scope": "session", "whole_tool": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = gw
        .call("s1", "transfer", json!({"amount": 1}), json!({}))
        .await;
    assert_eq!(
        (s, b["triggers"].clone()),
        (StatusCode::ACCEPTED, json!(["cost"])),
        "{b}"
    );

    for _ in 0..2 {
        assert_eq!(
            gw.call("s1", "search", json!({"q": "a"}), json!({}))
                .await
                .0,
            StatusCode::OK
        );
    }
    let (s, b) = gw.call("s1", "search", json!({"q": "b"}), json!({})).await;
    assert_eq!(
        (s, b["triggers"].clone()),
        (StatusCode::ACCEPTED, json!(["rate"])),
        "{b}"
    );
    assert!(
        b["reasons"]
            .to_string()
            .contains("rate threshold exceeded: 2 earlier call(s) in the last 60 s")
    );
    assert_eq!(
        gw.call("s2", "search", json!({"q": "b"}), json!({}))
            .await
            .0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn path_and_domain_scope_drift_is_held_including_dotdot_and_symlink_escapes() {
    let e = env().await;
    let gw = &e.gw;
    let root = std::fs::canonicalize(e.root.path()).unwrap();
    std::fs::write(root.join("ok.txt"), "x").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
    let p = |s: &str| json!({"path": s});
    let r = root.display();
    for inside in [
        format!("{r}/ok.txt"),
        format!("{r}/new/dir/file"),
        format!("{r}/sub/../ok.txt"),
        format!("{r}"),
    ] {
        let (s, b) = gw.call("s1", "read_path", p(&inside), json!({})).await;
        assert_eq!(s, StatusCode::OK, "{inside}: {b}");
    }
    for (escape, says) in [
        (format!("{r}/../../etc/passwd"), "normalises to"),
        (format!("{r}/link/secret"), "resolves to"),
        (format!("{r}/link/../../x"), "outside the allowed roots"),
        (format!("{r}x/y"), "outside the allowed roots"),
        ("ok.txt".to_string(), "not an absolute path"),
    ] {
        let (s, b) = gw.call("s1", "read_path", p(&escape), json!({})).await;
        assert_eq!(
            (s, b["triggers"].clone()),
            (StatusCode::ACCEPTED, json!(["paths"])),
            "{escape}: {b}"
        );
        assert!(b["reasons"].to_string().contains(says), "{escape}: {b}");
    }
    let (s, _) = gw
        .call("s1", "read_path", json!({"path": 7}), json!({}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);

    for ok in [
        "https://api.example.com/v1",
        "https://example.com/",
        "https://API.Example.COM./x",
    ] {
        let (s, b) = gw.call("s1", "fetch", json!({"url": ok}), json!({})).await;
        assert_eq!(s, StatusCode::OK, "{ok}: {b}");
    }
    for bad in [
        "https://example.com.evil.net/",
        "https://example.com@evil.net/",
        "https://evil.net/?u=https://a.example.com",
        "not a url",
        "file:///etc/passwd",
    ] {
        let (s, b) = gw.call("s1", "fetch", json!({"url": bad}), json!({})).await;
        assert_eq!(
            (s, b["triggers"].clone()),
            (StatusCode::ACCEPTED, json!(["domains"])),
            "{bad}: {b}"
        );
    }
}

#[tokio::test]
async fn timeouts_follow_risk_and_escalation_extends_the_wait_once_to_another_role() {
    let e = env().await;
    let gw = &e.gw;
    let span = |id: String| async move {
        let r = gw.as_agent(&id).await;
        let t = |k: &str| {
            time::OffsetDateTime::parse(
                r[k].as_str().unwrap(),
                &time::format_description::well_known::Rfc3339,
            )
            .unwrap()
        };
        (t("expires_at") - t("requested_at")).whole_seconds()
    };
    assert_eq!(span(gw.held("s1", "deploy", json!({})).await).await, 300); // R3: high
    assert_eq!(span(gw.held("s1", "send", json!({})).await).await, 120); // R2: medium
    assert_eq!(span(gw.held("s1", "low", json!({})).await).await, 60); // R1: low

    let id = gw.held("s1", "esc", json!({})).await;
    let (s, _) = gw
        .decide_with(&id, "olaf-key", json!({"decision": "approve"}))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN); // ops may not decide yet
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let rec = gw.as_agent(&id).await;
    assert_eq!(rec["status"], "pending", "{rec}");
    assert!(rec["escalated_at"].is_string());
    assert_eq!(rec["approvers"], json!(["finance", "ops"]));
    let (s, b) = gw
        .decide_with(&id, "olaf-key", json!({"decision": "approve"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

#[tokio::test]
async fn the_pending_cap_answers_429_and_identical_calls_join_the_pending_one() {
    let e = env_with(Settings {
        max_pending_per_agent: 2,
        ..Settings::default()
    })
    .await;
    let gw = &e.gw;
    let a = gw.held("s1", "send", json!({"n": 1})).await;
    gw.held("s1", "send", json!({"n": 2})).await;
    let (s, b) = gw.call("s1", "send", json!({"n": 3}), json!({})).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("TOO_MANY_PENDING")),
        "{b}"
    );
    let (s, b) = gw.call("s1", "send", json!({"n": 1}), json!({})).await;
    assert_eq!(
        (s, b["joined"].as_bool(), b["approval_id"].as_str()),
        (StatusCode::ACCEPTED, Some(true), Some(a.as_str()))
    );
    let (_, list) = gw
        .req(
            "GET",
            "/v1/approvals?status=pending",
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 2);
    // Deciding one frees a slot.
    gw.decide_with(&a, "alice-key", json!({"decision": "deny"}))
        .await;
    assert_eq!(
        gw.call("s1", "send", json!({"n": 3}), json!({})).await.0,
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn a_token_bound_to_a_device_is_refused_from_any_other() {
    let e = env().await;
    let gw = &e.gw;
    let (s, b) = gw
        .call(
            "s1",
            "send",
            json!({"n": 1}),
            json!({"device_id": "laptop-7", "run_id": "run-1"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let id = b["approval_id"].as_str().unwrap();
    gw.decide_with(id, "alice-key", json!({"decision": "approve"}))
        .await;
    let rec = gw.as_agent(id).await;
    assert_eq!(rec["approval_token"]["issuedToClientDeviceId"], "laptop-7");
    let t = token_of(&rec);
    for dev in [None, Some("phone-1")] {
        let (s, b) = gw.redeem(&t, "send", json!({"n": 1}), dev).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("DEVICE_MISMATCH")),
            "{dev:?}"
        );
    }
    assert_eq!(
        gw.redeem(&t, "send", json!({"n": 1}), Some("laptop-7"))
            .await
            .0,
        StatusCode::OK
    );
    let (_, ar) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{id}?format=approval-request"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(ar["runId"], "run-1");
}

#[tokio::test]
async fn similar_approvals_are_grouped_and_decided_together_each_with_its_own_token() {
    let e = env().await;
    let gw = &e.gw;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(gw.held("s1", "send", json!({"n": n})).await);
    }
    gw.held("s1", "deploy", json!({})).await;
    let (s, g) = gw
        .req(
            "GET",
            "/v1/approvals?status=pending&group=similar",
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let groups = g["groups"].as_array().unwrap();
    assert_eq!(
        groups
            .iter()
            .map(|g| (g["tool"].as_str().unwrap(), g["count"].as_u64().unwrap()))
            .collect::<Vec<_>>(),
        [("send", 3), ("deploy", 1)]
    );
    let mut body_ids = ids.clone();
    body_ids.push("no-such-id".into());
    let (s, b) = gw
        .req(
            "POST",
            "/v1/approvals/decisions",
            Some("alice-key"),
            Some(json!({"ids": body_ids, "decision": "approve"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let r = b["results"].as_array().unwrap();
    assert_eq!(
        r.iter()
            .map(|x| x["ok"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        [true, true, true, false]
    );
    assert_eq!(r[3]["code"], "NOT_FOUND");
    let mut tokens = std::collections::HashSet::new();
    for (n, id) in ids.iter().enumerate() {
        let rec = gw.as_agent(id).await;
        assert!(
            tokens.insert(
                rec["approval_token"]["tokenId"]
                    .as_str()
                    .unwrap()
                    .to_string()
            )
        );
        // Each token binds its own call only.
        let (s, _) = gw
            .redeem(&token_of(&rec), "send", json!({"n": (n + 1) % 3}), None)
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert_eq!(
            gw.redeem(&token_of(&rec), "send", json!({"n": n}), None)
                .await
                .0,
            StatusCode::OK
        );
    }
    let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
    let n: i64 = db
        .query_row(
            "SELECT count(*) FROM audit WHERE kind = 'decision'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 3);
}

#[tokio::test]
async fn agents_and_operators_cancel_approvals_and_sessions() {
    let e = env().await;
    let gw = &e.gw;
    let a = gw.held("s1", "send", json!({"n": 1})).await;
    // Another agent cannot see or cancel it.
    let (s, _) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{a}/cancel"),
            Some("other-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, b) = gw
        .req(
            "POST",
            &format!("/v1/approvals/{a}/cancel"),
            Some("bot-key"),
            Some(json!({"reason": "plan changed"})),
        )
        .await;
    assert_eq!(
        (s, b["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{b}"
    );
    let (s, _) = gw
        .decide_with(&a, "alice-key", json!({"decision": "approve"}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let b1 = gw.held("s1", "send", json!({"n": 2})).await;
    let b2 = gw.held("s1", "deploy", json!({})).await;
    let other = gw.held("s2", "send", json!({"n": 2})).await;
    let (s, b) = gw
        .req("POST", "/v1/sessions/s1/cancel", Some("alice-key"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let mut got: Vec<String> = serde_json::from_value(b["cancelled"].clone()).unwrap();
    got.sort();
    let mut want = vec![b1, b2];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(gw.as_agent(&other).await["status"], "pending");
    let rec = gw.as_agent(&want[0]).await;
    assert_eq!(
        (rec["status"].as_str(), rec["code"].as_str()),
        (Some("cancelled"), Some("TOOL_DENIED"))
    );
}

#[tokio::test]
async fn approval_request_and_mplp_confirm_validate_in_every_state() {
    let e = env().await;
    let gw = &e.gw;
    let ar_schema = validator("docs/schemas/approval-request.schema.json");
    let confirm = validator("mplp/schemas/v2/mplp-confirm.schema.json");
    let pending = gw
        .held(
            "s1",
            "deploy",
            json!({"env": "prod", "note": "x".repeat(300)}),
        )
        .await;
    let approved = gw.held("s1", "send", json!({"n": 1})).await;
    gw.decide_with(
        &approved,
        "alice-key",
        json!({"decision": "approve", "arguments": {"n": 2}}),
    )
    .await;
    let rejected = gw.held("s1", "send", json!({"n": 3})).await;
    gw.decide_with(
        &rejected,
        "alice-key",
        json!({"decision": "deny", "reason": "no"}),
    )
    .await;
    let cancelled = gw.held("s1", "send", json!({"n": 4})).await;
    gw.req(
        "POST",
        &format!("/v1/approvals/{cancelled}/cancel"),
        Some("bot-key"),
        None,
    )
    .await;
    let expired = gw.held("s1", "esc", json!({})).await;
    let db = rusqlite::Connection::open(gw.state.store.db_path()).unwrap();
    db.execute(
        "UPDATE approvals SET expires_at = 0, escalate_after_ms = NULL WHERE id = ?1",
        [&expired],
    )
    .unwrap();
    for (id, status) in [
        (&pending, "pending"),
        (&approved, "approved"),
        (&rejected, "rejected"),
        (&cancelled, "cancelled"),
        (&expired, "rejected"),
    ] {
        let (s, ar) = gw
            .req(
                "GET",
                &format!("/v1/approvals/{id}?format=approval-request"),
                Some("alice-key"),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&ar_schema, &ar, &format!("ApprovalRequest ({status})"));
        // The summary shows only values present in the canonical call.
        let canonical = ar["toolCallCanonical"].as_str().unwrap();
        let summary = ar["humanSummary"].as_str().unwrap();
        let rec = gw.as_agent(id).await;
        for (k, v) in rec["call"]["arguments"].as_object().unwrap() {
            let shown = serde_json_canonicalizer::to_string(v).unwrap();
            let shown: String = shown.chars().take(120).collect();
            assert!(
                summary.contains(&format!("{k} = {shown}")) && canonical.contains(&shown),
                "{summary}"
            );
        }
        let (s, c) = gw
            .req(
                "GET",
                &format!("/v1/approvals/{id}?format=mplp"),
                Some("alice-key"),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&confirm, &c, &format!("MPLP Confirm ({status})"));
        assert_eq!(c["status"], status, "{c}");
        assert_eq!(c["target_type"], "other");
        let events: Vec<&str> = c["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(events[0], "confirm.requested");
        if status != "pending" {
            assert_eq!(events[1], format!("confirm.{status}"));
            assert_eq!(c["decisions"][0]["status"], status);
        }
        for ev in c["events"].as_array().unwrap() {
            assert_eq!(ev["trace_id"], c["trace"]["trace_id"]);
        }
        // The governance block names the policy set that governed it (issue 10).
        let hash = &gw.state.registry.policy_set_sha256;
        let phase = if status == "pending" {
            "review"
        } else {
            "decided"
        };
        assert_eq!(
            c["governance"],
            json!({"lifecyclePhase": phase, "truthDomain": format!("policy-set sha256:{hash}"),
                   "locked": status != "pending"}),
            "{c}"
        );
        assert_eq!(c["trace"]["attributes"]["policy_set_sha256"], hash.as_str());
        let policies = if id == &pending || id == &expired {
            json!(["acme.proto.rules-v1"])
        } else {
            json!([])
        };
        assert_eq!(
            c["trace"]["attributes"]["governance_policies"], policies,
            "{c}"
        );
    }
    let (_, c) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{expired}?format=mplp"),
            Some("alice-key"),
            None,
        )
        .await;
    assert!(
        c["decisions"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("expired"),
        "{c}"
    );
    let (_, ar) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{pending}?format=approval-request"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(
        ar["suggestedAlternatives"],
        json!(["deploy to staging first"])
    );
    assert!(ar["humanSummary"].as_str().unwrap().contains('…'));
    let (s, _) = gw
        .req(
            "GET",
            &format!("/v1/approvals/{pending}?format=xml"),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // A trace id the agent gives is used; one that is not a UUID v4 is refused.
    let tid = "6f1c2b9e-8d4a-4c3b-9a7e-1f2d3c4b5a69";
    let (s, b) = gw
        .call("s1", "send", json!({"n": 9}), json!({"trace_id": tid}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (_, c) = gw
        .req(
            "GET",
            &format!(
                "/v1/approvals/{}?format=mplp",
                b["approval_id"].as_str().unwrap()
            ),
            Some("alice-key"),
            None,
        )
        .await;
    assert_eq!(c["trace"]["trace_id"], tid);
    let (s, _) = gw
        .call(
            "s1",
            "send",
            json!({"n": 9}),
            json!({"trace_id": "trace-1"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

/// Issue 10: the Confirm says which policies governed a held call and the hash of the policy
/// set then loaded, even after the policies change (recorded when the call was held).
#[tokio::test]
async fn a_confirm_keeps_the_policy_set_it_was_held_under_after_the_policies_change() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_reg(
        dir.path(),
        300_000,
        Settings::default(),
        crate::AGENTS,
        crate::GOV,
    )
    .await;
    let before = gw.state.registry.policy_set_sha256.clone();
    assert_eq!(before.len(), 64);
    let old = gw
        .held("s1", "pay", json!({"amount": 500, "to": "bob"}))
        .await;
    gw.stop().await;
    let gw = start_reg(
        dir.path(),
        300_000,
        Settings::default(),
        crate::AGENTS,
        crate::REDACTING_GOV,
    )
    .await;
    let after = gw.state.registry.policy_set_sha256.clone();
    assert_ne!(before, after);
    let new = gw
        .held("s2", "pay", json!({"amount": 600, "to": "bob"}))
        .await;
    let confirm = validator("mplp/schemas/v2/mplp-confirm.schema.json");
    for (id, hash) in [(&old, &before), (&new, &after)] {
        let (s, c) = gw
            .req(
                "GET",
                &format!("/v1/approvals/{id}?format=mplp"),
                Some("alice-key"),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&confirm, &c, "MPLP Confirm");
        assert_eq!(
            c["governance"]["truthDomain"],
            format!("policy-set sha256:{hash}")
        );
        assert_eq!(
            c["trace"]["attributes"]["governance_policies"],
            json!(["acme.test.rules-v1"])
        );
    }
    gw.stop().await;
}

/// Seed 002 Token: every field of a minted token says what it binds — its own UUID v4
/// `tokenId`, the approval, the call's hash, the expiry the agent is told, single use, the
/// scope and the device — and it validates against the schema.
#[tokio::test]
async fn a_token_carries_every_seed_002_field_with_the_values_it_binds() {
    let e = env().await;
    let gw = &e.gw;
    let (s, b) = gw
        .call(
            "s1",
            "send",
            json!({"n": 9}),
            json!({"device_id": "phone-1"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (s, _) = gw
        .decide_with(&id, "alice-key", json!({"decision": "approve"}))
        .await;
    assert_eq!(s, StatusCode::OK);
    let rec = gw.as_agent(&id).await;
    let t = &rec["approval_token"];
    assert_valid(
        &validator("docs/schemas/approval-token.schema.json"),
        t,
        "token",
    );
    let token_id = t["tokenId"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(token_id).is_ok_and(|u| u.get_version_num() == 4));
    assert_eq!(t["approvalId"], id.as_str());
    assert_eq!(t["toolCallHash"], rec["call_hash"]);
    assert_eq!(t["expiresAt"], rec["token_expires_at"]);
    assert_eq!(t["singleUse"], true);
    assert_eq!(t["scope"], "once");
    assert_eq!(t["issuedToClientDeviceId"], "phone-1");
    let other = gw.held("s1", "send", json!({"n": 10})).await;
    gw.decide_with(&other, "alice-key", json!({"decision": "approve"}))
        .await;
    assert_ne!(
        gw.as_agent(&other).await["approval_token"]["tokenId"],
        token_id
    );
}
