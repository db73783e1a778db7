//! Seed 002 triggers and timing: cost and rate thresholds hold the call that exceeds them
//! (grants do not bypass them), path and domain scopes hold drift (`..` and symlink escapes
//! included), timeouts follow the risk tier and escalate once to another role, and the pending
//! cap answers 429 while identical calls join the pending one.

use super::env::{env, env_with};
use crate::kit::{OP, assert_error, wait_seconds};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn cost_and_rate_thresholds_hold_the_call_that_exceeds_them_and_grants_do_not_bypass() {
    let e = env().await;
    let gw = &e.gw;
    for amount in [60, 30] {
        assert_eq!(
            gw.propose_in("s1", "transfer", json!({"amount": amount}))
                .await
                .0,
            StatusCode::OK
        );
    }
    let (s, b) = gw.propose_in("s1", "transfer", json!({"amount": 20})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["triggers"], json!(["cost"]));
    let why = b["reasons"].to_string();
    assert!(
        why.contains("cost threshold exceeded") && why.contains("totals 110"),
        "{why}"
    );
    // Another session has its own total; a missing amount cannot be checked.
    let s2 = async |args: Value| gw.propose_in("s2", "transfer", args).await.0;
    assert_eq!(s2(json!({"amount": 20})).await, StatusCode::OK);
    assert_eq!(s2(json!({"to": "x"})).await, StatusCode::ACCEPTED);
    // A session grant on a threshold-held call does not let the next one through.
    let id = b["approval_id"].as_str().unwrap();
    let decision = json!({"decision": "approve", "scope": "session", "whole_tool": true});
    let (s, _) = gw.decide_with(id, OP, decision).await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = gw.propose_in("s1", "transfer", json!({"amount": 1})).await;
    assert_eq!(
        (s, b["triggers"].clone()),
        (StatusCode::ACCEPTED, json!(["cost"])),
        "{b}"
    );

    let search =
        async |session: &str, q: &str| gw.propose_in(session, "search", json!({"q": q})).await;
    for _ in 0..2 {
        assert_eq!(search("s1", "a").await.0, StatusCode::OK);
    }
    let (s, b) = search("s1", "b").await;
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
    assert_eq!(search("s2", "b").await.0, StatusCode::OK);
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
        let (s, b) = gw.propose_in("s1", "read_path", p(&inside)).await;
        assert_eq!(s, StatusCode::OK, "{inside}: {b}");
    }
    for (escape, says) in [
        (format!("{r}/../../etc/passwd"), "normalises to"),
        (format!("{r}/link/secret"), "resolves to"),
        (format!("{r}/link/../../x"), "outside the allowed roots"),
        (format!("{r}x/y"), "outside the allowed roots"),
        ("ok.txt".to_string(), "not an absolute path"),
    ] {
        let (s, b) = gw.propose_in("s1", "read_path", p(&escape)).await;
        assert_eq!(
            (s, b["triggers"].clone()),
            (StatusCode::ACCEPTED, json!(["paths"])),
            "{escape}: {b}"
        );
        assert!(b["reasons"].to_string().contains(says), "{escape}: {b}");
    }
    let (s, _) = gw.propose_in("s1", "read_path", json!({"path": 7})).await;
    assert_eq!(s, StatusCode::ACCEPTED);

    for ok in [
        "https://api.example.com/v1",
        "https://example.com/",
        "https://api.example.com/a\\b?q=a b",
        "https://API.Example.COM./x",
    ] {
        let (s, b) = gw.propose_in("s1", "fetch", json!({"url": ok})).await;
        assert_eq!(s, StatusCode::OK, "{ok}: {b}");
    }
    for bad in [
        "https://example.com.evil.net/",
        "https://example.com@evil.net/",
        "https://evil.net/?u=https://a.example.com",
        "not a url",
        "file:///etc/passwd",
        // Found by review: WHATWG reads `\` as `/` (host a.example.com), RFC 3986 parsers
        // such as Python's urlsplit read the host after `@` (evil.net).
        "https://a.example.com\\@evil.net/x?d=SECRET",
        "https:\\\\api.example.com/",
        "https://api.example.com\tevil.net/",
        "https://api.example.com /",
    ] {
        let (s, b) = gw.propose_in("s1", "fetch", json!({"url": bad})).await;
        assert_eq!(
            (s, b["triggers"].clone()),
            (StatusCode::ACCEPTED, json!(["domains"])),
            "{bad}: {b}"
        );
    }
}

/// Found by review: a path was normalised lexically before its symbolic links were resolved,
/// so `root/link/../secret` was checked as `root/secret` (inside) while the kernel opens the
/// `secret` beside the link's target (outside); a dangling link was taken as a file inside the
/// root, though writing through it creates its target outside; and a path of 130,000
/// components cost one `canonicalize` per component, inside the store's one writer. Each is
/// held now, and a path the kernel would refuse (over 4,096 bytes) cannot be checked.
#[tokio::test]
async fn a_symlink_then_dotdot_a_dangling_link_or_an_overlong_path_does_not_escape_the_path_scope()
{
    let e = env().await;
    let gw = &e.gw;
    let root = std::fs::canonicalize(e.root.path()).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let out = std::fs::canonicalize(outside.path()).unwrap();
    std::fs::create_dir(out.join("sub")).unwrap();
    std::fs::write(out.join("secret"), "x").unwrap();
    std::fs::write(root.join("secret"), "decoy").unwrap();
    std::os::unix::fs::symlink(out.join("sub"), root.join("link")).unwrap();
    std::os::unix::fs::symlink(out.join("gone/cron"), root.join("dangling")).unwrap();
    std::os::unix::fs::symlink("sub", root.join("relative")).unwrap();
    std::os::unix::fs::symlink("loop2", root.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", root.join("loop2")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let r = root.display();
    for (escape, says) in [
        (format!("{r}/link/../secret"), "resolves to"),
        (format!("{r}/dangling"), "resolves to"),
        (format!("{r}/{}", "a/".repeat(3000)), "cannot be resolved"),
        (format!("{r}/loop1/x"), "cannot be resolved"),
    ] {
        let (s, b) = gw
            .propose_in("s1", "read_path", json!({"path": escape}))
            .await;
        assert_eq!(
            (s, b["triggers"].clone()),
            (StatusCode::ACCEPTED, json!(["paths"])),
            "{escape}: {b}"
        );
        assert!(b["reasons"].to_string().contains(says), "{escape}: {b}");
    }
    // A relative link inside the root, and `..` after it, stay inside.
    for inside in [format!("{r}/relative/x"), format!("{r}/relative/../secret")] {
        let (s, b) = gw
            .propose_in("s1", "read_path", json!({"path": inside}))
            .await;
        assert_eq!(s, StatusCode::OK, "{inside}: {b}");
    }
}

#[tokio::test]
async fn timeouts_follow_risk_and_escalation_extends_the_wait_once_to_another_role() {
    let e = env().await;
    let gw = &e.gw;
    let span = async |id: String| wait_seconds(&gw.as_agent(&id).await);
    assert_eq!(span(gw.held("s1", "deploy", json!({})).await).await, 300); // R3: high
    assert_eq!(span(gw.held("s1", "send", json!({})).await).await, 120); // R2: medium
    assert_eq!(span(gw.held("s1", "low", json!({})).await).await, 60); // R1: low

    let id = gw.held("s1", "esc", json!({})).await;
    let approve = json!({"decision": "approve"});
    let (s, _) = gw.decide_with(&id, "olaf-key", approve.clone()).await;
    assert_eq!(s, StatusCode::FORBIDDEN); // ops may not decide yet
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let rec = gw.as_agent(&id).await;
    assert_eq!(rec["status"], "pending", "{rec}");
    assert!(rec["escalated_at"].is_string());
    assert_eq!(rec["approvers"], json!(["finance", "ops"]));
    let (s, b) = gw.decide_with(&id, "olaf-key", approve).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

#[tokio::test]
async fn the_pending_cap_answers_429_and_identical_calls_join_the_pending_one() {
    let e = env_with(|s| s.max_pending_per_agent = 2).await;
    let gw = &e.gw;
    let a = gw.held("s1", "send", json!({"n": 1})).await;
    gw.held("s1", "send", json!({"n": 2})).await;
    let (s, b) = gw.propose_in("s1", "send", json!({"n": 3})).await;
    assert_error(s, &b, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_PENDING");
    let (s, b) = gw.propose_in("s1", "send", json!({"n": 1})).await;
    assert_eq!(
        (s, b["joined"].as_bool(), b["approval_id"].as_str()),
        (StatusCode::ACCEPTED, Some(true), Some(a.as_str()))
    );
    let (_, list) = gw.get("/v1/approvals?status=pending", OP).await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 2);
    // Deciding one frees a slot.
    gw.decide_with(&a, OP, json!({"decision": "deny"})).await;
    assert_eq!(
        gw.propose_in("s1", "send", json!({"n": 3})).await.0,
        StatusCode::ACCEPTED
    );
}
