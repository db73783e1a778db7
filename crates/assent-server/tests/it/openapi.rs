//! The OpenAPI document (`GET /openapi.json`, issue 15 §3): it lists exactly the routes that
//! `src/router.rs` mounts (read from its source, so a route added without docs fails here),
//! every operation answers the error body for its 4xx and names who may call it, and the live
//! gateway serves it with no key. Schemathesis checks it against the live server in
//! `tests/e2e/test_openapi.py`.

use crate::kit::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// `(METHOD, PATH)` of every `.route(PATH, METHOD(…).METHOD(…))` in `src/router.rs`, read
/// from its source: the text of each `.route(` call up to its closing parenthesis, its first
/// string literal the path, every `get(`, `post(`, `put(`, `delete(`, `patch(` in it a method.
fn mounted_routes() -> BTreeSet<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/router.rs");
    let src = std::fs::read_to_string(path).unwrap();
    let mut routes = BTreeSet::new();
    for (start, _) in src.match_indices(".route(") {
        let call = balanced(&src[start + ".route".len()..]);
        let path = call
            .split('"')
            .nth(1)
            .expect("a .route( without a path literal");
        let mut methods = 0;
        for m in ["get", "post", "put", "delete", "patch"] {
            let found = call.match_indices(&format!("{m}(")).any(|(i, _)| {
                i == 0
                    || !call.as_bytes()[i - 1].is_ascii_alphanumeric()
                        && call.as_bytes()[i - 1] != b'_'
            });
            if found {
                routes.insert((m.to_uppercase(), path.to_string()));
                methods += 1;
            }
        }
        assert!(methods > 0, "no method found in .route{call}");
    }
    routes
}

/// The text of the parenthesised group `s` starts with, parentheses included.
fn balanced(s: &str) -> &str {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[..=i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in router.rs");
}

/// `(METHOD, PATH)` of every operation of the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.insert((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

#[test]
fn the_document_lists_every_route_the_router_mounts_and_no_other() {
    let mounted: BTreeSet<_> = mounted_routes()
        .into_iter()
        // The dashboard's HTML pages and forms are for a browser, not an API (see openapi.rs).
        .filter(|(_, p)| p != "/ui" && !p.starts_with("/ui/"))
        .collect();
    assert!(
        mounted.len() > 40,
        "the router's source was not read: {mounted:?}"
    );
    let doc = assent_server::openapi::spec();
    let ops = documented(&doc);
    let undocumented: Vec<_> = mounted.difference(&ops).collect();
    let unmounted: Vec<_> = ops.difference(&mounted).collect();
    assert!(
        undocumented.is_empty(),
        "routes without OpenAPI docs: {undocumented:?}"
    );
    assert!(
        unmounted.is_empty(),
        "documented but not mounted: {unmounted:?}"
    );
}

#[test]
fn every_operation_documents_the_error_body_and_who_may_call_it() {
    let doc = assent_server::openapi::spec();
    assert_eq!(doc["openapi"], "3.1.0");
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    let open = [
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/v1/keys",
        "/.well-known/jwks.json",
        // Authenticated by Slack's request signature, not a bearer key.
        "/v1/integrations/slack/interactions",
    ];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{method} {path}");
            for status in ["400", "401", "404", "429", "503"] {
                let body = &op["responses"][status]["content"]["application/json"]["schema"];
                assert!(
                    body.to_string()
                        .contains("#/components/schemas/ApiErrorBody"),
                    "{what}: {status} without the error body"
                );
            }
            let security = op["security"]
                .as_array()
                .unwrap_or_else(|| panic!("{what}: no security"));
            let names: Vec<&String> = security
                .iter()
                .flat_map(|r| r.as_object().unwrap().keys())
                .collect();
            assert!(
                names.iter().all(|n| schemes.contains_key(*n)),
                "{what}: {names:?}"
            );
            if open.contains(&path.as_str()) {
                assert!(names.is_empty(), "{what} needs no key: {names:?}");
            } else {
                assert!(!names.is_empty(), "{what} names no principal kind");
            }
        }
    }
}

#[tokio::test]
async fn the_live_gateway_serves_the_document_with_no_key() {
    let gw = serve().await;
    let resp = gw.raw("GET", "/openapi.json", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let served: Value = resp.json().await.unwrap();
    assert_eq!(served, assent_server::openapi::spec());
}

/// The document, and a checker of live answers against it.
struct Doc(Value);

impl Doc {
    /// Asserts that `body`, answered with `status` to `method template`, is what the document
    /// says: the status is documented and the body validates (JSON Schema 2020-12, the
    /// dialect of OpenAPI 3.1) against its `application/json` schema.
    #[track_caller]
    fn check(&self, method: &str, template: &str, status: StatusCode, body: &Value) {
        let what = format!("{method} {template} → {status}");
        let schema = self.0["paths"][template][method.to_lowercase()]["responses"][status.as_str()]
            ["content"]["application/json"]["schema"]
            .clone();
        assert!(!schema.is_null(), "{what}: not documented");
        let root = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                          "components": self.0["components"], "allOf": [schema]});
        let v = jsonschema::validator_for(&root).unwrap();
        let errors: Vec<String> = v
            .iter_errors(body)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:?}\n{body}");
    }
}

/// A live gateway whose every answer is checked against the document before it is handed
/// back: one method a step (`at` for any route, `get` and `post` where the path is its own
/// template).
struct Checked {
    gw: Gw,
    doc: Doc,
}

impl Checked {
    /// A fresh gateway and the document it serves.
    async fn start() -> Checked {
        let doc = Doc(assent_server::openapi::spec());
        Checked {
            gw: serve().await,
            doc,
        }
    }

    /// Sends `method path` (`template` in the document) with `key` and `body`, checks the
    /// answer against the document and hands it back.
    async fn at(
        &self,
        (method, template, path): (&str, &str, &str),
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let (s, b) = self.gw.req(method, path, key, body).await;
        self.doc.check(method, template, s, &b);
        (s, b)
    }

    /// `GET path` documented as `template`.
    async fn get_at(&self, template: &str, path: &str, key: Option<&str>) -> (StatusCode, Value) {
        self.at(("GET", template, path), key, None).await
    }

    /// `GET path`, a path without parameters.
    async fn get(&self, path: &str, key: Option<&str>) -> (StatusCode, Value) {
        self.get_at(path, path, key).await
    }

    /// `POST path` (a path without parameters) with `body`.
    async fn post(
        &self,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.at(("POST", path, path), key, body).await
    }
}

#[tokio::test]
async fn every_answer_of_a_whole_life_cycle_is_what_the_document_says() {
    let c = Checked::start().await;
    let call = |tool: &str, args: Value| json!({"agent": "bot", "session_id": "s1", "tool": tool, "arguments": args});
    let tc = "/v1/tool-calls";
    let (s, _) = c.post(tc, Some(BOT), Some(call("read", json!({})))).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = c.post(tc, Some(BOT), Some(call("nope", json!({})))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let pay = call("pay", json!({"amount": 500, "to": "x"}));
    let (s, held) = c.post(tc, Some(BOT), Some(pay)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let id = approval_id(&held);
    let one = format!("/v1/approvals/{id}");
    for q in ["", "?group=similar"] {
        c.get_at("/v1/approvals", &format!("/v1/approvals{q}"), Some(OP))
            .await;
    }
    for q in ["", "?format=approval-request", "?format=mplp"] {
        let (s, _) = c
            .get_at("/v1/approvals/{id}", &format!("{one}{q}"), Some(OP))
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    let decide = (
        "POST",
        "/v1/approvals/{id}/decision",
        &*format!("{one}/decision"),
    );
    let d = json!({"decision": "approve", "scope": "session", "reason": "ok"});
    let (s, _) = c.at(decide, Some(OP), Some(d.clone())).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = c.at(decide, Some(OP), Some(d)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (_, mine) = c.get_at("/v1/approvals/{id}", &one, Some(BOT)).await;
    let redeem =
        json!({"token": token_of(&mine), "tool": "pay", "arguments": {"amount": 500, "to": "x"}});
    let (s, _) = c.post("/v1/tokens/redeem", Some(BOT), Some(redeem)).await;
    assert_eq!(s, StatusCode::OK);
    let receipt = format!("{one}/receipt");
    let (s, _) = c
        .get_at("/v1/approvals/{id}/receipt", &receipt, Some(OP))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, grants) = c
        .get_at("/v1/grants", "/v1/grants?all=true", Some(OP))
        .await;
    assert!(!grants["grants"].as_array().unwrap().is_empty(), "{grants}");
    // A held call in another session, its batch decision; one more cancelled, and its session.
    let s2 =
        |args: Value| json!({"agent": "bot", "session_id": "s2", "tool": "pay", "arguments": args});
    let (_, b) = c
        .post(tc, Some(BOT), Some(s2(json!({"amount": 700, "to": "y"}))))
        .await;
    let batch = json!({"ids": [approval_id(&b), "nope"], "decision": "deny", "reason": "no"});
    c.post("/v1/approvals/decisions", Some(OP), Some(batch))
        .await;
    let (_, b) = c
        .post(tc, Some(BOT), Some(s2(json!({"amount": 800, "to": "z"}))))
        .await;
    let cancel = format!("/v1/approvals/{}/cancel", approval_id(&b));
    let (s, _) = c
        .at(
            ("POST", "/v1/approvals/{id}/cancel", &cancel),
            Some(BOT),
            Some(json!({})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let s2_cancel = ("POST", "/v1/sessions/{id}/cancel", "/v1/sessions/s2/cancel");
    c.at(s2_cancel, Some(OP), None).await;
    c.get_at("/v1/approvals/{id}", "/v1/approvals/missing", Some(OP))
        .await;
}

#[tokio::test]
async fn every_answer_around_the_life_cycle_is_what_the_document_says() {
    let c = Checked::start().await;
    let ask = json!({"agent": "bot", "session_id": "s1", "question": "Which?", "accepted_response_kinds": ["freetext"]});
    let (s, q) = c.post("/v1/clarifications", Some(BOT), Some(ask)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let qid = q["id"].as_str().unwrap().to_string();
    let one = format!("/v1/clarifications/{qid}");
    c.get_at(
        "/v1/clarifications",
        "/v1/clarifications?status=all",
        Some(OP),
    )
    .await;
    c.get_at("/v1/clarifications/{id}", &one, Some(BOT)).await;
    let answer = (
        "POST",
        "/v1/clarifications/{id}/answer",
        &*format!("{one}/answer"),
    );
    let (s, _) = c
        .at(answer, Some(OP), Some(json!({"response": "this"})))
        .await;
    assert_eq!(s, StatusCode::OK);
    let tools = json!({"agent": "bot", "server": "fs", "tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]});
    let check = "/v1/tools/check";
    c.post(check, Some(BOT), Some(tools)).await;
    let changed = json!({"agent": "bot", "server": "fs", "tools": [{"name": "read_file", "description": "new"}]});
    let (_, held) = c.post(check, Some(BOT), Some(changed)).await;
    let (_, reviews) = c
        .get_at(
            "/v1/tools/reviews",
            "/v1/tools/reviews?status=all",
            Some(OP),
        )
        .await;
    let rid = reviews["reviews"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{held} {reviews}"));
    let review = format!("/v1/tools/reviews/{rid}");
    c.get_at("/v1/tools/reviews/{id}", &review, Some(BOT)).await;
    let accept = (
        "POST",
        "/v1/tools/reviews/{id}/accept",
        &*format!("{review}/accept"),
    );
    let (s, _) = c.at(accept, Some(OP), None).await;
    assert_eq!(s, StatusCode::OK);
    c.get("/v1/tools/pins", Some(OP)).await;
    for key in [BOT, OP] {
        c.get("/v1/whoami", Some(key)).await;
    }
    let declared = "/v1/agents/{agent}/mcp-servers/{alias}/tools";
    c.get_at(declared, "/v1/agents/bot/mcp-servers/fs/tools", Some(BOT))
        .await;
    c.get("/v1/audit/checkpoints", Some(OP)).await;
    c.get("/v1/webhooks/dead-letters", Some(OP)).await;
    c.post("/v1/reload", Some(OP), None).await;
    c.post("/v1/reload", Some(BOT), None).await;
    c.get("/v1/insights", Some(OP)).await;
    // A gateway with no config file has no policy files to replay against: the 409 body.
    let (s, _) = c
        .post("/v1/policies/replay", Some(OP), Some(json!({})))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    c.post("/v1/policies/replay", Some(BOT), Some(json!({})))
        .await;
    c.get("/v1/whoami", None).await;
    for open in ["/healthz", "/readyz", "/v1/keys", "/.well-known/jwks.json"] {
        let (s, _) = c.get(open, None).await;
        assert_eq!(s, StatusCode::OK, "{open}");
    }
}
