//! The AAEP tests' kit: a minimal SSE reader ([`Sse`]) over a streaming response, validators
//! for the AAEP core and handshake schemas, a `confirmation.reply` builder, and the gateway
//! helpers that subscribe, reply, hold a write for confirmation and read an approval's status.
//! No tests here.

use crate::kit::{BOT, Gw, OP};
use crate::schemas::{assert_valid, validator};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// The event type announcing a confirmation (an approval waiting for a reply).
pub const AWAITING: &str = "aaep:agent.awaiting.confirmation";

/// A minimal SSE reader over a streaming reqwest response.
pub struct Sse {
    resp: reqwest::Response,
    buf: String,
}

/// One SSE message: its `event:` name, `id:` and the JSON of its `data:` lines.
#[derive(Debug)]
pub struct Msg {
    /// `aaep.event` or `aaep.subscription`.
    pub event: String,
    /// The event id (`Last-Event-ID` to resume after it).
    pub id: Option<String>,
    /// The event itself.
    pub data: Value,
}

impl Sse {
    /// Opens the stream at `path` with `key`, resuming after `last` when given; asserts 200
    /// and `text/event-stream`.
    pub async fn open(gw: &Gw, key: &str, path: &str, last: Option<&str>) -> Sse {
        let mut r = gw.http.get(format!("{}{path}", gw.url)).bearer_auth(key);
        if let Some(l) = last {
            r = r.header("Last-Event-ID", l);
        }
        Sse::from_response(r.send().await.unwrap())
    }
    /// The stream of a response already received; asserts 200 and `text/event-stream`.
    pub fn from_response(resp: reqwest::Response) -> Sse {
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Sse {
            resp,
            buf: String::new(),
        }
    }
    /// The next message, or `None` after `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Msg> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                let (mut event, mut id, mut data) = (String::new(), None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                return Some(Msg {
                    event,
                    id,
                    data: serde_json::from_str(&data).unwrap(),
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .ok()?
                .ok()??;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    /// The next `aaep.event` of type `ty` within 5 s (skipping others).
    pub async fn expect(&mut self, ty: &str) -> Msg {
        loop {
            let m = self
                .next(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("no {ty} event"));
            if m.data["type"] == ty {
                assert_eq!(m.event, "aaep.event");
                assert_eq!(m.id.as_deref(), m.data["event_id"].as_str());
                return m;
            }
        }
    }
    /// The `reply_token` of the next event of type `ty` (an `awaiting.*`).
    pub async fn reply_token(&mut self, ty: &str) -> String {
        self.expect(ty).await.data["reply_token"]
            .as_str()
            .unwrap()
            .to_string()
    }
    /// Asserts no event of type `ty` arrives within `wait`.
    pub async fn none_of(&mut self, ty: &str, wait: Duration) {
        while let Some(m) = self.next(wait).await {
            assert_ne!(m.data["type"], ty, "unexpected {:#}", m.data);
        }
    }
}

/// The validator of the AAEP core event `name` (`agent.awaiting.confirmation`…).
pub fn core(name: &str) -> jsonschema::Validator {
    validator(&format!("aaep/schemas/core/{name}.schema.json"))
}
/// The validator of the AAEP handshake message `name` (`subscription.request`…).
pub fn handshake(name: &str) -> jsonschema::Validator {
    validator(&format!("aaep/schemas/handshake/{name}.schema.json"))
}

/// Now, as RFC 3339 (a reply's `timestamp`).
pub fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// A `confirmation.reply` to `token` on subscription `sub`: `decision` is `accept`, `reject`
/// (or anything, to test refusals), decided by `user:test` now.
pub fn confirm(token: &str, sub: &str, decision: &str) -> Value {
    json!({"type": "confirmation.reply", "reply_token": token, "decision": decision,
           "subscription_id": sub, "timestamp": now(), "decided_by": "user:test"})
}

impl Gw {
    /// Subscribes with `key` (reply capabilities when `replies`, plus `extra`'s), validating
    /// the request and the `subscription.accepted`; the subscription id and its open stream.
    pub async fn subscribe(&self, key: &str, replies: bool, extra: Value) -> (String, Sse) {
        let mut caps = json!({"supports_confirmation_reply": replies, "supports_clarification_reply": replies});
        if let (Value::Object(c), Value::Object(e)) = (&mut caps, extra) {
            c.extend(e);
        }
        let req = json!({"type": "subscription.request", "aaep_version": "1.0.0",
                         "subscriber_id": format!("test-{key}"), "capabilities": caps});
        assert_valid(&handshake("subscription.request"), &req, "our own request");
        let resp = self
            .http
            .post(format!("{}/aaep/v1/subscriptions", self.url))
            .bearer_auth(key)
            .json(&req)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let loc = resp.headers()["location"].to_str().unwrap().to_string();
        let body: Value = resp.json().await.unwrap();
        assert_valid(
            &handshake("subscription.accepted"),
            &body,
            "subscription.accepted",
        );
        let id = body["subscription_id"].as_str().unwrap().to_string();
        assert_eq!(loc, format!("/aaep/v1/events?subscription_id={id}"));
        let sse = Sse::open(self, key, &loc, None).await;
        (id, sse)
    }
    /// Subscribes as operator alice with reply support and no filters.
    pub async fn listen(&self) -> (String, Sse) {
        self.subscribe(OP, true, json!({})).await
    }
    /// Posts a reply `body` to `/aaep/v1/replies` with `key`; the status (the answer has no
    /// body, asserted).
    pub async fn reply(&self, key: Option<&str>, body: Value) -> StatusCode {
        let mut r = self
            .http
            .post(format!("{}/aaep/v1/replies", self.url))
            .json(&body);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        let resp = r.send().await.unwrap();
        let s = resp.status();
        assert!(
            resp.bytes().await.unwrap().is_empty(),
            "a reply answer has no body"
        );
        s
    }
    /// Proposes `fs.write_file` of `x` to `path` (always held); asserts 202, returns the id.
    pub async fn hold_write(&self, path: &str) -> String {
        let args = json!({"path": path, "content": "x"});
        let (s, b) = self
            .call("s1", "write_file", args, json!({"server": "fs"}))
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        b["approval_id"].as_str().unwrap().to_string()
    }
    /// [`Gw::hold_write`]s `path` and reads the confirmation's reply token from `sse`; the
    /// approval id and the token.
    pub async fn confirmation(&self, sse: &mut Sse, path: &str) -> (String, String) {
        let id = self.hold_write(path).await;
        (id, sse.reply_token(AWAITING).await)
    }
    /// Approval `id` as operator alice sees it.
    pub async fn status(&self, id: &str) -> Value {
        self.approval(id, OP).await.1
    }
    /// Asks clarification `q` as `bot` (asserts 202); its id.
    pub async fn ask(&self, q: Value) -> String {
        let (s, b) = self.post("/v1/clarifications", BOT, q).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        b["id"].as_str().unwrap().to_string()
    }
    /// `GET /v1/clarifications/{id}` (a `?query` may follow the id) with `key`.
    pub async fn clarification(&self, id: &str, key: &str) -> (StatusCode, Value) {
        self.get(&format!("/v1/clarifications/{id}"), key).await
    }
    /// Answers clarification `id` with `response` as operator alice.
    pub async fn answer(&self, id: &str, response: Value) -> (StatusCode, Value) {
        let path = format!("/v1/clarifications/{id}/answer");
        self.post(&path, OP, json!({"response": response})).await
    }
}
