//! assent-mcp: an MCP stdio proxy that puts the assent gateway in front of one MCP server.
//!
//! The client speaks MCP (newline-delimited JSON-RPC 2.0) to the proxy on stdin/stdout; the
//! proxy runs the upstream server as a child process and relays every message, except as
//! below. A client line is read strictly ([`assent_core::json`]): one with a duplicate key or
//! a number a double would change is refused with a JSON-RPC error, and what goes upstream is
//! the serialisation of the value the proxy read (and gated), never the client's bytes, so an
//! upstream parser that reads JSON differently cannot run something other than what was
//! gated. Further:
//! - `tools/call` requests go to the gateway first (`POST /v1/tool-calls`). An allowed call is
//!   forwarded; a held call waits (long-polling the approval) and is forwarded only after its
//!   approval token was redeemed for the exact call; anything else — denied, rejected, expired
//!   without an approving default, cancelled, or the gateway unreachable — is answered with a
//!   tool result `isError: true` whose text starts `TOOL_DENIED:`, and never forwarded.
//! - While a call waits, the proxy sends `notifications/progress` every `progress_seconds` when
//!   the client gave a `progressToken`, so clients that reset their request timeout on
//!   progress keep waiting. A `notifications/cancelled` for a waiting call (or the client
//!   closing stdin) cancels its approval at the gateway, and the call is never forwarded.
//! - Tool-list pinning: after `initialize`, the proxy reads the upstream's `tools/list` itself
//!   and reports it (`POST /v1/tools/check`). A tool whose definition differs from its pin, or
//!   that appeared after the server was pinned, is held for an operator's review: its calls
//!   wait and are never forwarded until the new definition is accepted, and `tools/list`
//!   shows the client the pinned definition (a new tool not at all) until then.
//! - Every forwarded call's result is reported (`POST /v1/tool-results`: its SHA-256 and size
//!   go to the audit log, linked to the approval). A result larger than the call's
//!   `thresholds.output_bytes` (the JSON of its `result`) is held for an operator and relayed
//!   only after the approval's token was redeemed for that exact result; otherwise the client
//!   gets `TOOL_DENIED: result withheld …`.
//! - `tools/list` results are filtered to the tools the agent file declares for the server
//!   alias when it lists `allowed_tools`.
//! - MCP eras (issue 11): a 2026-07-28 client and a handshake-era upstream (or the reverse)
//!   meet in the proxy, which translates the handshake and every message into its receiver's
//!   era ([`era`]); in-client approval asks a modern client in an `input_required` result;
//!   a call that became a task held for an approval is named after it (`approval-ID`) and can
//!   be resumed with `tasks/get` by the proxy of a later connection.
//! - JSON-RPC batches are refused (a batch could hide a `tools/call`), and so is a line that is
//!   not JSON (a more lenient upstream parser could find a `tools/call` in it), and a
//!   `tools/call` without an id is dropped.
//!
//! It is a client of the assent server, not a second policy engine: it holds no policy and
//! fails closed when it cannot ask. The relay is hand-written rather than built on rmcp
//! because it must pass every other message through unchanged in meaning, whatever protocol
//! version the two ends negotiate.

#![warn(missing_docs)]

mod ends;
pub mod era;
pub mod hub;

use anyhow::Context;
use era::Era;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot, watch};

/// How the proxy is set up (`assent mcp --agent ID --server ALIAS -- COMMAND ARGS...`).
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Base URL of the gateway, e.g. `http://127.0.0.1:7878`.
    pub gateway_url: String,
    /// The agent's API key (`ASSENT_API_KEY`).
    pub api_key: String,
    /// Agent id the proxy acts for.
    pub agent: String,
    /// MCP server alias in the agent file.
    pub server: String,
    /// Session id sent with every call.
    pub session_id: String,
    /// Upstream command and arguments.
    pub command: Vec<String>,
    /// Seconds per long-poll request while a call is held (at most 60).
    pub poll_seconds: u64,
    /// Seconds between progress notifications while a call waits (when the client gave a
    /// progress token).
    pub progress_seconds: u64,
}

/// What became of one `tools/call` at the gateway.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Forward the call upstream.
    Forward {
        /// `Some(arguments)` when an operator approved it with modified arguments (the token
        /// was redeemed for those).
        edited: Option<Value>,
        /// The `thresholds.output_bytes` covering the call: a larger result is held.
        output_limit: Option<u64>,
        /// The approval it ran under, when it was held or granted.
        approval_id: Option<String>,
    },
    /// Answer the client with `TOOL_DENIED: reason`.
    Denied(String),
    /// Ask the client's user in an `input_required` result (a modern client, SEP-2322): the
    /// call is held as `approval_id`, the client retries with the answer ([`era::input_required`]).
    AskClient {
        /// The approval the retried call resumes.
        approval_id: String,
        /// The in-client question ([`in_client_question`]).
        question: String,
    },
}

/// How the person driving the agent can be asked about a held call that a rule lets them
/// approve (in-client approval).
#[derive(Clone, Default)]
pub enum Asker {
    /// They cannot be asked: operators decide.
    #[default]
    Nobody,
    /// Ask now, in a request to the client (elicitation, legacy clients).
    Elicit(AskUser),
    /// Answer the call with an `input_required` result the client retries with the answer
    /// (modern clients): [`Outcome::AskClient`].
    InputRequired,
}

/// The gateway's view of one upstream tool (`POST /v1/tools/check`).
#[derive(Debug, Clone, PartialEq)]
pub struct PinState {
    /// `pinned`, `first_use` or `held`.
    pub state: String,
    /// The review of a held tool.
    pub review_id: Option<String>,
    /// The pinned definition, if any.
    pub pinned: Option<Value>,
}

/// Asks the person driving the agent, in the MCP client, whether a held call may run
/// (elicitation, the question of [`in_client_question`], the form of
/// [`elicitation_schema`]). `Some` their answer, `None` no answer (dismissed, unsupported,
/// timed out).
pub type AskUser = Arc<
    dyn Fn(
            String,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<UserAnswer>> + Send>>
        + Send
        + Sync,
>;

/// The answer of the person driving the agent to an in-client question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAnswer {
    /// Approve (`true`) or deny the call.
    pub approve: bool,
    /// The reason they gave, if any (trimmed, at most 1,000 characters).
    pub reason: Option<String>,
}

impl UserAnswer {
    /// The decision reason relayed to the gateway: `approved by the user` or `declined by the
    /// user`, followed by `: REASON` when they gave one.
    pub fn relayed_reason(&self) -> String {
        let what = if self.approve {
            "approved by the user"
        } else {
            "declined by the user"
        };
        match &self.reason {
            Some(r) => format!("{what}: {r}"),
            None => what.to_string(),
        }
    }
}

/// The elicitation `requestedSchema` of an in-client question: a required boolean `approve`
/// and an optional `reason` string, relayed as the decision's reason (seed 002: a deny reason).
pub fn elicitation_schema() -> Value {
    json!({"type": "object", "required": ["approve"], "properties": {
        "approve": {"type": "boolean", "title": "Approve this call?",
                    "description": "Only this one call, with exactly these arguments."},
        "reason": {"type": "string", "title": "Reason (optional)",
                   "description": "Why you approve or deny it; recorded with your decision."}}})
}

/// The answer in an elicitation result: `accept` gives `content.approve` (anything but `true`
/// denies) and `content.reason`; `decline` denies; anything else is no answer.
pub fn user_answer(action: &str, content: Option<&Value>) -> Option<UserAnswer> {
    let reason = content
        .and_then(|c| c["reason"].as_str())
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| r.chars().take(1000).collect());
    match action {
        "accept" => Some(UserAnswer {
            approve: content.is_some_and(|c| c["approve"] == true),
            reason,
        }),
        "decline" => Some(UserAnswer {
            approve: false,
            reason,
        }),
        _ => None,
    }
}

/// The in-client question for a held call, from the gateway's `202` answer: what it asks
/// (message, risk tier, summary), then, as seed 002 asks of every approval surface, why it
/// needs approval (the reasons), its predicted side effects and its rollback notes.
pub fn in_client_question(b: &Value) -> String {
    let mut q = format!(
        "assent: {} (risk {}; {}).",
        text(b, "message"),
        b["risk_tier"].as_str().unwrap_or("?"),
        text(b, "human_summary")
    );
    let list = |k: &str, field: Option<&str>| -> Vec<String> {
        b[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| match field {
                        Some(f) => x[f].as_str(),
                        None => x.as_str(),
                    })
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for (title, items) in [
        ("Why", list("reasons", Some("text"))),
        ("Side effects", list("side_effects", None)),
        ("Rollback", list("rollback", None)),
    ] {
        if !items.is_empty() {
            q.push_str(&format!("\n{title}: {}", items.join("; ")));
        }
    }
    q.push_str("\nApprove this call? (You may give a reason.)");
    q
}

/// A small client of the assent HTTP API for the agent side.
#[derive(Clone)]
pub struct Gateway {
    http: reqwest::Client,
    cfg: ProxyConfig,
}

fn text(b: &Value, k: &str) -> String {
    b[k].as_str().unwrap_or("").to_string()
}

impl Gateway {
    /// A client for `cfg.gateway_url`; errors only if the HTTP client cannot be built.
    pub fn new(cfg: ProxyConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(cfg.poll_seconds + 30))
            .build()?;
        Ok(Self { http, cfg })
    }

    /// A client sharing `http` (its connection pool) with others.
    pub fn with_client(http: reqwest::Client, cfg: ProxyConfig) -> Self {
        Self { http, cfg }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cfg.gateway_url.trim_end_matches('/'))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<(u16, Value), String> {
        let resp = req
            .bearer_auth(&self.cfg.api_key)
            .send()
            .await
            .map_err(|e| format!("the assent gateway cannot be reached ({})", e.without_url()))?;
        let status = resp.status().as_u16();
        let body = resp.json::<Value>().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// The tools the agent declares for this server (`None`: all).
    pub async fn declared_tools(&self) -> Option<Vec<String>> {
        let path = format!(
            "/v1/agents/{}/mcp-servers/{}/tools",
            self.cfg.agent, self.cfg.server
        );
        match self.send(self.http.get(self.url(&path))).await {
            Ok((200, b)) => serde_json::from_value(b["tools"].clone()).ok().flatten(),
            _ => None,
        }
    }

    /// Reports the upstream's tool definitions and returns the gateway's verdict per tool name.
    pub async fn check_tools(&self, tools: &[Value]) -> Result<HashMap<String, PinState>, String> {
        let body = json!({"agent": self.cfg.agent, "server": self.cfg.server, "tools": tools});
        match self
            .send(self.http.post(self.url("/v1/tools/check")).json(&body))
            .await?
        {
            (200, b) => Ok(b["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    (
                        text(t, "name"),
                        PinState {
                            state: text(t, "state"),
                            review_id: t["review_id"].as_str().map(str::to_string),
                            pinned: Some(t["pinned"].clone()).filter(|p| !p.is_null()),
                        },
                    )
                })
                .collect()),
            (s, b) => Err(format!(
                "the gateway refused the tool list ({s} {}: {})",
                text(&b, "code"),
                text(&b, "message")
            )),
        }
    }

    /// Waits for tool review `id` to be decided: `Ok(())` accepted, `Err(why)` rejected.
    pub async fn await_review(&self, id: &str) -> Result<(), String> {
        loop {
            let url = self.url(&format!(
                "/v1/tools/reviews/{id}?wait={}",
                self.cfg.poll_seconds
            ));
            match self.send(self.http.get(url)).await {
                Ok((200, r)) => match r["status"].as_str() {
                    Some("accepted") => return Ok(()),
                    Some("pending") => continue,
                    _ => {
                        return Err(format!(
                            "the changed definition of `{}` was rejected by {} (review {id})",
                            text(&r, "tool"),
                            text(&r, "decided_by")
                        ));
                    }
                },
                Ok((s, r)) => {
                    return Err(format!(
                        "tool review {id} cannot be read ({s} {})",
                        text(&r, "code")
                    ));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for the gateway");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Runs one call through the gateway: propose, wait for a human if held, redeem the token.
    /// `held` becomes [`Hold::Approval`] as soon as the call is held (so it can be cancelled).
    pub async fn gate(&self, tool: &str, arguments: &Value, held: &HoldState) -> Outcome {
        self.gate_asking(tool, arguments, held, Asker::Nobody).await
    }

    /// [`Gateway::gate`]; when the gateway allows in-client approval for the held call, the
    /// client's user is asked too, as `ask` says: by elicitation while the call waits (the
    /// first decision wins, an operator's included; the answer is relayed as the user's
    /// decision), or by answering [`Outcome::AskClient`] at once.
    pub async fn gate_asking(
        &self,
        tool: &str,
        arguments: &Value,
        held: &HoldState,
        ask: Asker,
    ) -> Outcome {
        match self.gate_inner(tool, arguments, held, ask).await {
            Ok(o) => o,
            Err(e) => Outcome::Denied(e),
        }
    }

    async fn gate_inner(
        &self,
        tool: &str,
        arguments: &Value,
        held: &HoldState,
        ask: Asker,
    ) -> Result<Outcome, String> {
        let body = json!({"agent": self.cfg.agent, "session_id": self.cfg.session_id,
                          "tool": tool, "server": self.cfg.server, "arguments": arguments});
        let (status, b) = self
            .send(self.http.post(self.url("/v1/tool-calls")).json(&body))
            .await?;
        match (status, b["decision"].as_str()) {
            // Covered by a grant: it still carries a single-use token to redeem.
            (200, Some("allow")) if b["token"].is_string() => {
                let limit = b["output_bytes"].as_u64();
                let id = b["approval_id"].as_str().map(str::to_string);
                return self
                    .redeem(&text(&b, "token"), tool, arguments, None, limit, id)
                    .await;
            }
            (200, Some("allow")) => {
                return Ok(Outcome::Forward {
                    edited: None,
                    output_limit: b["output_bytes"].as_u64(),
                    approval_id: None,
                });
            }
            (403, Some("deny")) => return Ok(Outcome::Denied(text(&b, "reason"))),
            (202, Some("pending")) => {}
            _ => {
                return Ok(Outcome::Denied(format!(
                    "the assent gateway refused the call ({status} {}: {})",
                    text(&b, "code"),
                    text(&b, "message")
                )));
            }
        }
        let id = text(&b, "approval_id");
        held.send_replace(Hold::Approval(id.clone()));
        tracing::info!(approval_id = %id, tool, "call held for approval");
        let in_client = b["in_client_approval"] == true;
        let asking = match ask {
            Asker::Elicit(ask) if in_client => {
                let question = in_client_question(&b);
                let this = self.clone();
                let id = id.clone();
                Some(tokio::spawn(async move {
                    if let Some(answer) = ask(question).await {
                        this.relay_answer(&id, &answer).await;
                    }
                }))
            }
            Asker::InputRequired if in_client => {
                return Ok(Outcome::AskClient {
                    approval_id: id,
                    question: in_client_question(&b),
                });
            }
            _ => None,
        };
        let settled = self.settle(&id, tool, arguments).await;
        if let Some(t) = asking {
            t.abort();
        }
        settled
    }

    /// Relays the in-client answer of the person driving the agent as approval `id`'s user
    /// decision (`POST /v1/approvals/{id}/user-decision`; the gateway checks that a rule allows
    /// it). Logged, not returned, when it cannot be relayed: operators still decide.
    async fn relay_answer(&self, id: &str, answer: &UserAnswer) {
        let url = self.url(&format!("/v1/approvals/{id}/user-decision"));
        let body = json!({"decision": if answer.approve { "approve" } else { "deny" },
                          "reason": answer.relayed_reason()});
        match self.send(self.http.post(url).json(&body)).await {
            Ok((200, _)) => {}
            Ok((s, b)) => tracing::warn!(approval_id = %id, status = s, code = %text(&b, "code"),
                "the user's decision was not taken"),
            Err(e) => tracing::warn!(error = %e, "could not relay the user's decision"),
        }
    }

    /// Approval `id` as the agent may read it (`GET /v1/approvals/{id}`, no wait): `Err(why)`
    /// when it cannot be read (another agent's approvals read as missing).
    pub async fn approval(&self, id: &str) -> Result<Value, String> {
        match self
            .send(self.http.get(self.url(&format!("/v1/approvals/{id}"))))
            .await?
        {
            (200, r) => Ok(r),
            (s, r) => Err(format!(
                "approval {id} cannot be read ({s} {})",
                text(&r, "code")
            )),
        }
    }

    /// Resumes held call `approval_id` for a client that comes back to it (a modern client
    /// retrying with its in-client answer, or a task read after the connection that made it
    /// was lost): the approval must be this agent's, on this server, for exactly `tool` and
    /// `arguments` when they are given (`None`: the approval's own call, for a task). The
    /// user's `answer` is relayed when there is one, then the call waits for the decision and
    /// its token is redeemed, as in [`Gateway::gate`]. Returns the outcome and the tool and
    /// arguments it is for.
    pub async fn resume(
        &self,
        approval_id: &str,
        call: Option<(&str, &Value)>,
        answer: Option<&UserAnswer>,
        held: &HoldState,
    ) -> (Outcome, String, Value) {
        let rec = match self.approval(approval_id).await {
            Ok(r) => r,
            Err(why) => return (Outcome::Denied(why), String::new(), Value::Null),
        };
        let (tool, arguments) = (text(&rec["call"], "tool"), rec["call"]["arguments"].clone());
        if rec["call"]["server"] != self.cfg.server.as_str() {
            let why = format!(
                "approval {approval_id} is not for server `{}`",
                self.cfg.server
            );
            return (Outcome::Denied(why), tool, arguments);
        }
        if let Some((t, a)) = call
            && (t != tool || *a != arguments)
        {
            let why = format!(
                "approval {approval_id} is for another call than the one retried (`{tool}` with its own arguments)"
            );
            return (Outcome::Denied(why), tool, arguments);
        }
        held.send_replace(Hold::Approval(approval_id.to_string()));
        if let Some(a) = answer
            && rec["status"] == "pending"
        {
            self.relay_answer(approval_id, a).await;
        }
        let outcome = self
            .settle(approval_id, &tool, &arguments)
            .await
            .unwrap_or_else(Outcome::Denied);
        (outcome, tool, arguments)
    }

    /// Waits for held approval `id` to be decided, then redeems its token for `arguments` (or
    /// the operator's edited ones): [`Outcome::Forward`], or [`Outcome::Denied`] with why.
    async fn settle(&self, id: &str, tool: &str, arguments: &Value) -> Result<Outcome, String> {
        let rec = match self.wait(id).await? {
            Ok(r) => r,
            Err(why) => return Ok(Outcome::Denied(why)),
        };
        let status = text(&rec, "status");
        let Some(token) = rec["token"].as_str() else {
            let why = rec["reason"].as_str().unwrap_or("no token was issued");
            return Ok(Outcome::Denied(format!(
                "approval {id} was {status}: {why}"
            )));
        };
        // Approved with modifications: the token binds the operator's arguments.
        let edited = (rec["arguments_changed"] == true).then(|| rec["arguments"].clone());
        let run_with = edited.as_ref().unwrap_or(arguments);
        let limit = rec["output_bytes"].as_u64();
        self.redeem(
            token,
            tool,
            run_with,
            edited.clone(),
            limit,
            Some(id.to_string()),
        )
        .await
    }

    /// Cancels approval `id` (the client withdrew the request).
    pub async fn cancel(&self, id: &str, reason: &str) {
        let url = self.url(&format!("/v1/approvals/{id}/cancel"));
        match self
            .send(self.http.post(url).json(&json!({ "reason": reason })))
            .await
        {
            Ok((200, _)) => tracing::info!(approval_id = %id, "approval cancelled: {reason}"),
            Ok((s, b)) => {
                tracing::warn!(approval_id = %id, status = s, code = %text(&b, "code"), "could not cancel the approval")
            }
            Err(e) => {
                tracing::warn!(approval_id = %id, error = %e, "could not cancel the approval")
            }
        }
    }

    /// Long-polls approval `id` until it leaves `pending`: `Ok(Ok(record))`, or
    /// `Ok(Err(why))` when it cannot be read.
    async fn wait(&self, id: &str) -> Result<Result<Value, String>, String> {
        let rec = loop {
            let url = self.url(&format!(
                "/v1/approvals/{id}?wait={}",
                self.cfg.poll_seconds
            ));
            match self.send(self.http.get(url)).await {
                Ok((200, r)) if r["status"] == "pending" => continue,
                Ok((200, r)) => break r,
                Ok((s, r)) => {
                    return Ok(Err(format!(
                        "approval {id} cannot be read ({s} {})",
                        text(&r, "code")
                    )));
                }
                // The gateway may be restarting: keep waiting, the approval is durable.
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for the gateway");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        Ok(Ok(rec))
    }

    /// Reports a forwarded call's `result` (its JSON text) and says whether it may reach the
    /// client: within the threshold it is released at once; over it an operator decides, and
    /// it is released only after the approval's token was redeemed for this exact result.
    /// `Err(why)` when it is withheld.
    pub async fn release(
        &self,
        tool: &str,
        arguments: &Value,
        result: &str,
        approval_id: Option<&str>,
    ) -> Result<(), String> {
        use sha2::Digest;
        let hash = hex::encode(sha2::Sha256::digest(result.as_bytes()));
        let preview: String = result.chars().take(2048).collect();
        let body = json!({"agent": self.cfg.agent, "session_id": self.cfg.session_id, "tool": tool,
                          "server": self.cfg.server, "arguments": arguments,
                          "output_bytes": result.len(), "result_sha256": hash, "preview": preview,
                          "approval_id": approval_id});
        let (status, b) = self
            .send(self.http.post(self.url("/v1/tool-results")).json(&body))
            .await?;
        match (status, b["decision"].as_str()) {
            (200, Some("allow")) => return Ok(()),
            (202, Some("pending")) => {}
            _ => {
                return Err(format!(
                    "the assent gateway refused the result ({status} {}: {})",
                    text(&b, "code"),
                    text(&b, "message")
                ));
            }
        }
        let id = text(&b, "approval_id");
        tracing::info!(approval_id = %id, tool, bytes = result.len(), "result held for approval");
        let rec = self.wait(&id).await??;
        let Some(token) = rec["token"].as_str() else {
            let why = rec["reason"].as_str().unwrap_or("no token was issued");
            return Err(format!("approval {id} was {}: {why}", text(&rec, "status")));
        };
        if rec["call"]["arguments"]["result_sha256"] != hash {
            return Err(format!("approval {id} is for another result"));
        }
        let synthetic = format!("result.{tool}");
        let redeem = json!({"token": token, "tool": synthetic, "server": self.cfg.server,
                            "arguments": rec["call"]["arguments"]});
        match self
            .send(self.http.post(self.url("/v1/tokens/redeem")).json(&redeem))
            .await?
        {
            (200, _) => Ok(()),
            (s, r) => Err(format!(
                "approval token refused ({s} {}: {})",
                text(&r, "code"),
                text(&r, "message")
            )),
        }
    }

    async fn redeem(
        &self,
        token: &str,
        tool: &str,
        arguments: &Value,
        edited: Option<Value>,
        output_limit: Option<u64>,
        approval_id: Option<String>,
    ) -> Result<Outcome, String> {
        let body = json!({"token": token, "tool": tool, "server": self.cfg.server, "arguments": arguments});
        match self
            .send(self.http.post(self.url("/v1/tokens/redeem")).json(&body))
            .await?
        {
            (200, _) => Ok(Outcome::Forward {
                edited,
                output_limit,
                approval_id,
            }),
            (s, r) => Ok(Outcome::Denied(format!(
                "approval token refused ({s} {}: {})",
                text(&r, "code"),
                text(&r, "message")
            ))),
        }
    }
}

/// What a call is waiting for, shared between the call and whatever watches it (progress
/// notifications, cancellation, an MCP task's status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Hold {
    /// Not held (yet): the gateway is deciding.
    #[default]
    Nothing,
    /// The tool's changed definition waits for an operator's review (the review id).
    Review(String),
    /// The call waits for a human's decision (the approval id).
    Approval(String),
    /// Cleared: the call is being forwarded to the upstream (no longer cancellable).
    Forwarding,
}

impl Hold {
    /// The approval id while the call waits for one.
    pub fn approval(&self) -> Option<String> {
        match self {
            Hold::Approval(a) => Some(a.clone()),
            _ => None,
        }
    }

    /// A progress / status line for the client, e.g. `waiting for a human to approve
    /// write_file (assent approval apr_…)`.
    pub fn describe(&self, tool: &str) -> String {
        match self {
            Hold::Nothing => format!("waiting for assent to clear {tool}"),
            Hold::Review(r) => format!(
                "waiting for an operator to review the changed definition of {tool} (assent tool review {r})"
            ),
            Hold::Approval(a) => {
                format!("waiting for a human to approve {tool} (assent approval {a})")
            }
            Hold::Forwarding => format!("running {tool}"),
        }
    }
}

/// A call's [`Hold`], observable by its watchers.
pub type HoldState = watch::Sender<Hold>;

fn denied_result(id: &Value, reason: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": denied_value(reason)}).to_string()
}

/// The `tools/call` result of a denial: an error result whose text starts `TOOL_DENIED:`.
fn denied_value(reason: &str) -> Value {
    json!({"content": [{"type": "text", "text": format!("TOOL_DENIED: {reason}")}], "isError": true})
}

/// How long an MCP task outlives its creation (24 h, in ms): a call still waiting then is
/// marked failed; a finished task is kept as long again for the client to read.
pub(crate) const TASK_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A task's settings: its TTL, a 1 s suggested polling interval and `status` as its message.
pub(crate) fn task_options(status: String) -> TaskOptions {
    TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(1000)
        .with_status_message(status)
}

/// The JSON-RPC error (one line of JSON) for a client message that was refused before
/// anything was gated (the stdio proxy, and the hub over stdio and HTTP):
/// `-32700` when it is not JSON, `-32600` (invalid request) when it is ambiguous (a duplicate
/// key, an inexact number, too deep), naming the JSON pointer. The request's `id` is echoed
/// when the line has one unambiguous top-level `id`, so the client's call fails at once.
pub fn refusal(line: &str, e: &assent_core::json::StrictJsonError) -> String {
    use assent_core::json::StrictJsonError;
    let code = match e {
        StrictJsonError::Syntax(_) => -32700,
        _ => -32600,
    };
    let id = match e {
        StrictJsonError::DuplicateKey { path } if path == "/id" => Value::Null,
        StrictJsonError::Syntax(_) => Value::Null,
        _ => serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .filter(|i| i.is_string() || i.is_number())
            .unwrap_or(Value::Null),
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": format!("assent: {} ({e})", e.code())}}).to_string()
}

/// A JSON-RPC reply line to request `id`: `result`, or `error` as its error object.
fn reply(id: &Value, r: Result<Value, rmcp::ErrorData>) -> String {
    match r {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
    }
    .to_string()
}

/// A forwarded call waiting for its upstream response: the tool, the arguments it ran with,
/// the output limit and the approval it ran under.
struct Forwarded {
    tool: String,
    arguments: Value,
    limit: Option<u64>,
    approval_id: Option<String>,
    /// The MCP task awaiting this result, when the call became one.
    task: Option<TaskDone>,
}

/// Delivers a task's outcome: the `tools/call` result (JSON), or how it ended without one.
type TaskDone = oneshot::Sender<Result<Value, TaskExit>>;

/// The MCP tasks extension (SEP-2663).
const TASKS: &str = "io.modelcontextprotocol/tasks";
/// Where a request carries its sender's capabilities (modern sessions).
const CLIENT_CAPS_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// Removes the tasks extension from the client capabilities `msg` declares (at `initialize`
/// or in a request's `_meta`), so that the upstream answers every forwarded call itself and
/// its result passes through the proxy. Returns whether it was declared.
fn take_tasks_capability(msg: &mut Value) -> bool {
    let mut declared = false;
    // `get_mut`, not indexing: indexing would add `"params": null` to every message.
    let Some(params) = msg.get_mut("params").filter(|p| p.is_object()) else {
        return false;
    };
    if let Some(ext) = params
        .pointer_mut("/capabilities/extensions")
        .and_then(Value::as_object_mut)
    {
        declared |= ext.remove(TASKS).is_some();
    }
    if let Some(ext) = params
        .get_mut("_meta")
        .and_then(|m| m.get_mut(CLIENT_CAPS_META))
        .and_then(|c| c.get_mut("extensions"))
        .and_then(Value::as_object_mut)
    {
        declared |= ext.remove(TASKS).is_some();
    }
    declared
}

/// The JSON of a task's `CallToolResult`: parsed for the task store, or why not.
fn tool_result(v: &Value) -> Result<rmcp::model::CallToolResult, TaskExit> {
    serde_json::from_value(v.clone()).map_err(|e| {
        TaskExit::Error(rmcp::ErrorData::internal_error(
            format!("the upstream's result is not a tool result: {e}"),
            None,
        ))
    })
}

/// A call waiting at the gateway: the approval id once held, and how to stop the wait:
/// `Some(reason)` cancels its approval with that reason, `None` only stops (the approval was
/// cancelled already).
struct Waiting {
    approval: Arc<HoldState>,
    cancel: oneshot::Sender<Option<&'static str>>,
    /// Set once the call became a task (it then outlives the connection).
    task: Arc<std::sync::atomic::AtomicBool>,
}

/// The prefix of the id of a task held for an approval: `approval-` and the approval id.
const TASK_APPROVAL_PREFIX: &str = "approval-";

/// What [`resume_task`] needs of the proxy.
struct Resumed {
    gw: Arc<Gateway>,
    pins: Arc<Pins>,
    forwarded: Arc<Mutex<HashMap<String, Forwarded>>>,
    to_upstream: mpsc::UnboundedSender<String>,
    tasks: TaskManager,
}

/// Resumes the task of held call `approval` for a client that made it through a connection
/// that is gone (another proxy process): a new task in this process waits for the approval
/// (this agent's, on this server: [`Gateway::resume`]), passes the tool's pin check, redeems
/// the token and forwards exactly the approved call; its result completes the task. The token
/// is single-use, so a call already forwarded elsewhere is never forwarded again. Returns the
/// new task's id in this process's task manager.
fn resume_task(r: Resumed, approval: String) -> String {
    let held: Arc<HoldState> = Arc::new(watch::Sender::new(Hold::Approval(approval.clone())));
    let (done_tx, done_rx) = oneshot::channel::<Result<Value, TaskExit>>();
    let status = held.borrow().describe("the call");
    let (gw, a) = (r.gw.clone(), approval.clone());
    let task = r.tasks.spawn(task_options(status), {
        let held = held.clone();
        move |tctx| {
            Box::pin(task_run(
                tctx,
                done_rx,
                held,
                "the call".into(),
                move || {
                    tokio::spawn(async move {
                        gw.cancel(&a, "the MCP client cancelled the task").await;
                    });
                },
            ))
        }
    });
    tokio::spawn(async move {
        let tool = match r.gw.approval(&approval).await {
            Ok(rec) => text(&rec["call"], "tool"),
            Err(why) => {
                let _ = done_tx.send(Ok(denied_value(&why)));
                return;
            }
        };
        if let Err(why) = pin_gate(&r.gw, &r.pins, &tool, &held).await {
            let _ = done_tx.send(Ok(denied_value(&why)));
            return;
        }
        held.send_replace(Hold::Approval(approval.clone()));
        let (outcome, tool, args) = r.gw.resume(&approval, None, None, &held).await;
        match outcome {
            Outcome::Forward {
                edited,
                output_limit,
                approval_id,
            } => {
                held.send_replace(Hold::Forwarding);
                let run_with = edited.unwrap_or(args);
                let own = json!(format!("assent-resumed-{approval}"));
                r.forwarded.lock().expect("forwarded").insert(
                    own.to_string(),
                    Forwarded {
                        tool: tool.clone(),
                        arguments: run_with.clone(),
                        limit: output_limit,
                        approval_id,
                        task: Some(done_tx),
                    },
                );
                let call = json!({"jsonrpc": "2.0", "id": own, "method": "tools/call",
                                  "params": {"name": tool, "arguments": run_with}});
                let _ = r.to_upstream.send(call.to_string());
            }
            Outcome::Denied(why) => {
                let _ = done_tx.send(Ok(denied_value(&why)));
            }
            // `resume` never asks: the question was asked when the call was made.
            Outcome::AskClient { approval_id, .. } => {
                let why =
                    format!("approval {approval_id} waits for an answer this task cannot give");
                let _ = done_tx.send(Ok(denied_value(&why)));
            }
        }
    });
    task.task_id
}

/// The pin check of the upstream's tools: `None` until the first check finished.
type Pins = watch::Sender<Option<Result<HashMap<String, PinState>, String>>>;

const PIN_ID_PREFIX: &str = "assent-pins-";

/// Waits for the pin check and returns whether `tool` may be called now: `Ok` when pinned or
/// accepted after review, `Err(why)` otherwise. Waits for a pending review.
async fn pin_gate(gw: &Gateway, pins: &Pins, tool: &str, held: &HoldState) -> Result<(), String> {
    let mut rx = pins.subscribe();
    let checked = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(Option::is_some))
        .await
        .map_err(|_| "the upstream's tool list could not be verified in time".to_string())?
        .map_err(|_| "the proxy is shutting down".to_string())?
        .clone()
        .expect("checked");
    let state = match checked {
        Err(e) => {
            return Err(format!(
                "the upstream's tool list could not be verified: {e}"
            ));
        }
        Ok(map) => map.get(tool).cloned(),
    };
    match state {
        None => Err(format!(
            "`{tool}` is not in the upstream's verified tool list"
        )),
        Some(s) if s.state != "held" => Ok(()),
        Some(s) => {
            let id = s.review_id.unwrap_or_default();
            tracing::info!(tool, review_id = %id, "call waits for the review of a changed tool");
            held.send_replace(Hold::Review(id.clone()));
            gw.await_review(&id).await?;
            pins.send_modify(|p| {
                if let Some(Ok(map)) = p
                    && let Some(t) = map.get_mut(tool)
                {
                    t.state = "pinned".into();
                }
            });
            Ok(())
        }
    }
}

/// The life of a call that became an MCP task, after its creation: the outcome from
/// `done`, the status message kept to what it waits for, and on `tasks/cancel` the wait
/// withdrawn by `withdraw` (a call already forwarded completes: cancellation is cooperative).
pub(crate) async fn task_run(
    tctx: rmcp::task_manager::TaskContext,
    mut done: oneshot::Receiver<Result<Value, TaskExit>>,
    held: Arc<HoldState>,
    name: String,
    withdraw: impl FnOnce() + Send,
) -> Result<rmcp::model::CallToolResult, TaskExit> {
    let mut watch = held.subscribe();
    let mut withdraw = Some(withdraw);
    loop {
        tokio::select! {
            r = &mut done => {
                let cancelled = withdraw.is_none();
                let value = r.unwrap_or(Err(TaskExit::Cancelled))?;
                let result = tool_result(&value)?;
                if cancelled && result.is_error == Some(true) && *held.borrow() != Hold::Forwarding {
                    return Err(TaskExit::Cancelled);
                }
                let ran = *held.borrow() == Hold::Forwarding;
                tctx.set_status_message(if ran { format!("ran {name}") } else { format!("{name} was not run") });
                return Ok(result);
            }
            changed = watch.changed() => {
                if changed.is_ok() {
                    let now = watch.borrow_and_update().describe(&name);
                    tctx.set_status_message(now);
                }
            }
            _ = tctx.cancelled(), if withdraw.is_some() => {
                if let Some(w) = withdraw.take() {
                    w();
                }
            }
        }
    }
}

/// Rewrites a `tools/list` result for the client: held tools show their pinned definition,
/// or are left out when they were never pinned.
pub(crate) fn apply_pins(tools: &mut Vec<Value>, states: &HashMap<String, PinState>) {
    tools.retain_mut(|t| {
        let name = t["name"].as_str().unwrap_or("").to_string();
        match states.get(&name) {
            Some(s) if s.state == "held" => match &s.pinned {
                Some(p) => {
                    *t = p.clone();
                    true
                }
                None => false,
            },
            Some(_) => true,
            None => false,
        }
    });
}

/// Writes each line from `rx` to `out` as `era(line)` and a newline, flushed, until `rx` closes
/// or `out` fails: one writer per direction, so concurrent tasks never interleave lines, and
/// every line crosses in its receiver's era ([`ends::Ends`]).
fn write_lines<W: tokio::io::AsyncWrite + Unpin + Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<String>,
    mut out: W,
    era: impl Fn(String) -> String + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            let line = era(line);
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = out.flush().await;
        }
    })
}

/// Sends the proxy's own `tools/list` (for the pin check) once.
fn ask_pins_once(asked: &std::sync::atomic::AtomicBool, tu: &mpsc::UnboundedSender<String>) {
    if !asked.swap(true, std::sync::atomic::Ordering::SeqCst) {
        let _ = tu.send(
            json!({"jsonrpc": "2.0", "id": format!("{PIN_ID_PREFIX}0"), "method": "tools/list"})
                .to_string(),
        );
    }
}

/// What [`handshake`] did with an upstream response.
enum Handshake {
    /// Not part of a translated handshake: relay it as usual.
    Relay,
    /// Handled; `pins`: the upstream is ready, so its tools may be checked now.
    Done { pins: bool },
}

/// The upstream's answers to the handshake, translated where the two ends speak different
/// eras (issue 11):
/// - the answer to a modern client's `server/discover`: a modern upstream's is relayed (with
///   the tasks extension the proxy serves); any other (a legacy upstream's error) makes the
///   proxy `initialize` the upstream itself and answer the discover from that;
/// - the answer to a legacy client's `initialize`: an `UNSUPPORTED_PROTOCOL_VERSION` error (a
///   modern-only upstream) makes the proxy `server/discover` it and answer from that.
fn handshake(
    ends: &ends::Ends,
    v: &Value,
    key: &str,
    tc: &mpsc::UnboundedSender<String>,
    tu: &mpsc::WeakUnboundedSender<String>,
    client_tasks: &std::sync::atomic::AtomicBool,
) -> Handshake {
    // Weak, as the reader's: the upstream's stdin closes once the client has left.
    let to_upstream = |msg: Value| {
        if let Some(tu) = tu.upgrade() {
            let _ = tu.send(msg.to_string());
        }
    };
    let with_tasks = |mut r: Value, tasks: bool| {
        if tasks && r["capabilities"].is_object() {
            r["capabilities"]["extensions"][TASKS] = json!({});
        }
        r
    };
    if let Some(id) = ends.take_probe(key) {
        let modern = v["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == era::MODERN_VERSION));
        if modern {
            ends.set_upstream(Era::Modern);
            let _ = tc.send(reply(&id, Ok(with_tasks(v["result"].clone(), true))));
            return Handshake::Done { pins: true };
        }
        tracing::info!(
            "the upstream speaks the handshake era: assent initialises it for the client"
        );
        ends.park_discover(id);
        let init = json!({"jsonrpc": "2.0", "id": ends::OWN_INIT_ID, "method": "initialize",
            "params": {"protocolVersion": era::LATEST_HANDSHAKE_VERSION, "capabilities": {},
                       "clientInfo": ends.client_info()}});
        to_upstream(init);
        return Handshake::Done { pins: false };
    }
    if v["id"] == ends::OWN_INIT_ID {
        let result = v.get("result").cloned();
        let parked = ends.initialised(result.clone().unwrap_or(Value::Null));
        if let Some(id) = parked {
            let answer = match &result {
                Some(r) => Ok(era::discover_from_initialize(r, true)),
                None => Err(rmcp::ErrorData::internal_error(
                    format!("the upstream refused initialize: {}", v["error"]),
                    None,
                )),
            };
            let _ = tc.send(reply(&id, answer));
        }
        if result.is_some() {
            to_upstream(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }
        return Handshake::Done {
            pins: result.is_some(),
        };
    }
    if v["id"] == ends::OWN_DISCOVER_ID {
        if let Some((id, version)) = ends.take_parked_init() {
            let answer = match v.get("result") {
                Some(r) => Ok(with_tasks(
                    era::initialize_from_discover(r, version.as_deref()),
                    client_tasks.load(std::sync::atomic::Ordering::SeqCst),
                )),
                None => Err(rmcp::ErrorData::internal_error(
                    format!("the upstream refused server/discover: {}", v["error"]),
                    None,
                )),
            };
            let _ = tc.send(reply(&id, answer));
        }
        return Handshake::Done { pins: false };
    }
    if let Some((id, version)) = ends.take_legacy_init(key) {
        if v["error"]["code"] == era::UNSUPPORTED_PROTOCOL_VERSION {
            tracing::info!(
                "the upstream speaks only the modern era: assent discovers it for the client"
            );
            ends.set_upstream(Era::Modern);
            // Answered when the discover is.
            ends.park_init(id, version);
            to_upstream(json!({"jsonrpc": "2.0", "id": ends::OWN_DISCOVER_ID,
                               "method": "server/discover"}));
            return Handshake::Done { pins: false };
        }
        ends.set_upstream(Era::Legacy);
    }
    Handshake::Relay
}

/// Runs the proxy until the client closes stdin or the upstream exits. Returns the upstream's
/// exit code (or 1 when it was killed).
pub async fn run(cfg: ProxyConfig) -> anyhow::Result<i32> {
    let (prog, args) = cfg
        .command
        .split_first()
        .context("no upstream command given after --")?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start upstream MCP server `{prog}`"))?;
    let child_in = child.stdin.take().context("upstream stdin")?;
    let child_out = child.stdout.take().context("upstream stdout")?;
    let progress_every = Duration::from_secs(cfg.progress_seconds.max(1));
    let gw = Arc::new(Gateway::new(cfg)?);
    let list_ids: Arc<Mutex<HashSet<String>>> = Arc::default();
    let forwarded: Arc<Mutex<HashMap<String, Forwarded>>> = Arc::default();
    let waiting: Arc<Mutex<HashMap<String, Waiting>>> = Arc::default();
    let pins: Arc<Pins> = Arc::new(watch::channel(None).0);
    // MCP tasks (SEP-2663): whether the client declared the extension at initialize, the ids
    // of such initialize requests (their answers advertise the extension), and the tasks.
    let client_tasks = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let init_ids: Arc<Mutex<HashSet<String>>> = Arc::default();
    let tasks = TaskManager::new();
    // The era of each end and the translation between them (issue 11).
    let ends = Arc::new(ends::Ends::default());
    // Tasks named after their approval (`approval-ID`), which a later proxy process can
    // resume from the gateway: the external id → the task manager's id.
    let task_ids: Arc<Mutex<HashMap<String, String>>> = Arc::default();

    // One writer per direction, so concurrent tasks never interleave lines.
    let (to_client, client_rx) = mpsc::unbounded_channel::<String>();
    let (to_upstream, upstream_rx) = mpsc::unbounded_channel::<String>();
    // In-client approval: whether the client can be asked (elicitation), and its pending answers.
    let client_elicits = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let elicits: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>> = Arc::default();
    let ask: AskUser = {
        let (tc, elicits) = (to_client.clone(), elicits.clone());
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Arc::new(move |question: String| {
            let id = format!(
                "assent-elicit-{}",
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let (tx, rx) = oneshot::channel::<Value>();
            elicits.lock().expect("elicits").insert(id.clone(), tx);
            let _ = tc.send(
                json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
                    "message": question, "requestedSchema": elicitation_schema(),
                }})
                .to_string(),
            );
            Box::pin(async move {
                let reply = rx.await.ok()?;
                let r = &reply["result"];
                user_answer(r["action"].as_str()?, r.get("content"))
            })
        })
    };
    // Whether the proxy's own tools/list was sent (after `initialized`, or at the first call).
    let pins_asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ask_pins = {
        let (asked, tu) = (pins_asked.clone(), to_upstream.clone());
        move || ask_pins_once(&asked, &tu)
    };
    let client_writer = {
        let ends = ends.clone();
        write_lines(client_rx, tokio::io::stdout(), move |l| ends.to_client(l))
    };
    // Its end drops child_in, which closes the upstream's stdin.
    write_lines(upstream_rx, child_in, {
        let ends = ends.clone();
        move |l| ends.to_upstream(l)
    });

    // Upstream → client.
    let declared = gw.declared_tools().await;
    let upstream_reader = {
        // Weak: the reader must not keep the upstream's stdin open after the client left.
        let (ids, tc, tu, fw, gw, pins, inits) = (
            list_ids.clone(),
            to_client.clone(),
            to_upstream.downgrade(),
            forwarded.clone(),
            gw.clone(),
            pins.clone(),
            init_ids.clone(),
        );
        let (ends, pins_asked, client_tasks) =
            (ends.clone(), pins_asked.clone(), client_tasks.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(child_out).lines();
            // The proxy's own tools/list pages, accumulated until the last one.
            let mut own_pages: Vec<Value> = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                let parsed = serde_json::from_str::<Value>(&line).ok();
                let response = parsed
                    .as_ref()
                    .filter(|v| v.get("method").is_none() && v.get("id").is_some());
                let Some(v) = response else {
                    if tc.send(line).is_err() {
                        break;
                    }
                    continue;
                };
                let key = v["id"].to_string();
                // The proxy's own tools/list: check the pins, never relay.
                if v["id"]
                    .as_str()
                    .is_some_and(|i| i.starts_with(PIN_ID_PREFIX))
                {
                    own_pages.extend(v["result"]["tools"].as_array().cloned().unwrap_or_default());
                    match v["result"]["nextCursor"].as_str() {
                        Some(c) if own_pages.len() < 100_000 => {
                            let n = own_pages.len();
                            let Some(tu) = tu.upgrade() else { break };
                            let _ = tu.send(
                                json!({"jsonrpc": "2.0", "id": format!("{PIN_ID_PREFIX}{n}"),
                                "method": "tools/list", "params": {"cursor": c}})
                                .to_string(),
                            );
                        }
                        _ => {
                            let checked = if v.get("error").is_some() {
                                Err(format!("the upstream's tools/list failed: {}", v["error"]))
                            } else {
                                gw.check_tools(&own_pages).await
                            };
                            if let Err(e) = &checked {
                                tracing::warn!(error = %e, "tool list not verified: every call is refused");
                            }
                            pins.send_replace(Some(checked));
                            own_pages.clear();
                        }
                    }
                    continue;
                }
                // The handshake, translated between eras where the two ends differ.
                match handshake(&ends, v, &key, &tc, &tu, &client_tasks) {
                    Handshake::Relay => {}
                    Handshake::Done { pins: ask } => {
                        if let Some(tu) = tu.upgrade().filter(|_| ask) {
                            ask_pins_once(&pins_asked, &tu);
                        }
                        continue;
                    }
                }
                // The answer to initialize: the proxy serves the tasks extension itself.
                if inits.lock().expect("inits").remove(&key) {
                    let mut v = v.clone();
                    if let Some(caps) = v["result"]["capabilities"].as_object_mut() {
                        let ext = caps.entry("extensions").or_insert_with(|| json!({}));
                        if let Some(ext) = ext.as_object_mut() {
                            ext.insert(TASKS.into(), json!({}));
                        }
                    }
                    if tc.send(v.to_string()).is_err() {
                        break;
                    }
                    continue;
                }
                // A client's tools/list: declared tools only, pinned definitions only.
                if ids.lock().expect("ids").remove(&key) {
                    let mut v = v.clone();
                    if let Some(tools) = v["result"]["tools"].as_array_mut() {
                        if let Some(allowed) = &declared {
                            tools.retain(|t| {
                                t["name"]
                                    .as_str()
                                    .is_some_and(|n| allowed.iter().any(|a| a == n))
                            });
                        }
                        match gw.check_tools(tools).await {
                            Ok(states) => {
                                apply_pins(tools, &states);
                                pins.send_modify(|p| {
                                    if let Some(Ok(map)) = p {
                                        map.extend(states);
                                    }
                                });
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "tool list not verified: no tool is shown");
                                tools.clear();
                            }
                        }
                    }
                    if tc.send(v.to_string()).is_err() {
                        break;
                    }
                    continue;
                }
                // A forwarded call's result: reported; over its limit, held for an operator.
                let entry = fw.lock().expect("forwarded").remove(&key);
                if let Some(mut f) = entry {
                    let result = v.get("result").map(Value::to_string).unwrap_or_default();
                    let over = f.limit.is_some_and(|l| result.len() as u64 > l);
                    let (gw, tc, v) = (gw.clone(), tc.clone(), v.clone());
                    let task = f.task.take();
                    let report = async move {
                        gw.release(&f.tool, &f.arguments, &result, f.approval_id.as_deref())
                            .await
                    };
                    // A task's call: its result goes to the task, not to the client.
                    if let Some(done) = task {
                        tokio::spawn(async move {
                            let reported = if over {
                                Some(report.await)
                            } else {
                                tokio::spawn(async move {
                                    if let Err(e) = report.await {
                                        tracing::warn!(error = %e, "result hash not recorded");
                                    }
                                });
                                None
                            };
                            let outcome = match (v.get("result"), reported) {
                                (Some(_), Some(Err(why))) => {
                                    Ok(denied_value(&format!("result withheld: {why}")))
                                }
                                (Some(r), _) => Ok(r.clone()),
                                (None, _) => Err(TaskExit::Error(
                                    serde_json::from_value(v["error"].clone()).unwrap_or_else(
                                        |_| {
                                            rmcp::ErrorData::internal_error(
                                                "the upstream failed",
                                                None,
                                            )
                                        },
                                    ),
                                )),
                            };
                            let _ = done.send(outcome);
                        });
                        continue;
                    }
                    if over {
                        tokio::spawn(async move {
                            let out = match report.await {
                                Ok(()) => line,
                                Err(why) => {
                                    tracing::info!(reason = %why, "result withheld");
                                    denied_result(&v["id"], &format!("result withheld: {why}"))
                                }
                            };
                            let _ = tc.send(out);
                        });
                        continue;
                    }
                    // Within the limit: relay now, record the result hash alongside.
                    tokio::spawn(async move {
                        if let Err(e) = report.await {
                            tracing::warn!(error = %e, "result hash not recorded");
                        }
                    });
                }
                if tc.send(line).is_err() {
                    break;
                }
            }
        })
    };

    // Client → upstream.
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Ok(Some(line)) = line else { break };
                if line.trim().is_empty() { continue; }
                // Fail closed: a line we cannot parse is never forwarded, since a more lenient
                // upstream parser might read a tools/call in it that was never gated; nor is one
                // that two parsers could read differently (a duplicate key, a number a double
                // would change).
                let msg: Value = match assent_core::json::parse_value(line.as_bytes()) {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = to_client.send(refusal(&line, &e));
                        continue;
                    }
                };
                if msg.is_array() {
                    let _ = to_client.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "assent: JSON-RPC batches are not supported"}}).to_string());
                    continue;
                }
                // The client's answer to the proxy's own elicitation: never for the upstream.
                if msg.get("method").is_none()
                    && let Some(id) = msg["id"].as_str().filter(|i| i.starts_with("assent-elicit-"))
                {
                    let waiter = elicits.lock().expect("elicits").remove(id);
                    if let Some(w) = waiter {
                        let _ = w.send(msg);
                    }
                    continue;
                }
                let mut msg = msg;
                // The proxy serves the tasks flow itself; the upstream never sees it declared.
                let declares_tasks = take_tasks_capability(&mut msg);
                ends.read_client(&msg);
                // A modern client retrying with its in-client answer resumes its approval; the
                // upstream sees a first call.
                let resume = (msg["method"] == "tools/call")
                    .then(|| era::resumed_approval(&msg["params"]).map(|id| (id, era::input_answer(&msg["params"]))))
                    .flatten();
                era::strip_own_round(&mut msg);
                // What goes upstream is the serialisation of the value the proxy read and gated,
                // never the client's bytes.
                let line = msg.to_string();
                if msg["method"] == "initialize" {
                    let can = msg["params"]["capabilities"]["elicitation"].is_object();
                    client_elicits.store(can, std::sync::atomic::Ordering::SeqCst);
                    client_tasks.store(declares_tasks, std::sync::atomic::Ordering::SeqCst);
                    if let Some(id) = msg.get("id").filter(|_| declares_tasks) {
                        init_ids.lock().expect("inits").insert(id.to_string());
                    }
                    if let Some(id) = msg.get("id") {
                        ends.note_legacy_init(id.clone(), msg["params"]["protocolVersion"].as_str().map(str::to_string));
                    }
                }
                match (msg["method"].as_str(), msg.get("id")) {
                    (Some("tools/call"), Some(id)) => {
                        ask_pins();
                        let id = id.clone();
                        let key = id.to_string();
                        let tool = msg["params"]["name"].as_str().unwrap_or("").to_string();
                        let args = match &msg["params"]["arguments"] { Value::Null => json!({}), a => a.clone() };
                        let progress_token = msg["params"]["_meta"]["progressToken"].clone();
                        let (gw, tc, tu) = (gw.clone(), to_client.clone(), to_upstream.clone());
                        let (fw, wt, pins) = (forwarded.clone(), waiting.clone(), pins.clone());
                        let approval: Arc<HoldState> = Arc::new(watch::Sender::new(Hold::Nothing));
                        let as_task = declares_tasks || client_tasks.load(std::sync::atomic::Ordering::SeqCst);
                        // In-client approval: a modern client is asked in an input_required
                        // result, a legacy one by elicitation (a task has no request to answer).
                        let asker = match ends.client() {
                            Some(Era::Modern) if !as_task && era::can_elicit(&ends.client_capabilities()) => Asker::InputRequired,
                            Some(Era::Modern) => Asker::Nobody,
                            _ if client_elicits.load(std::sync::atomic::Ordering::SeqCst) => Asker::Elicit(ask.clone()),
                            _ => Asker::Nobody,
                        };
                        let (cancel_tx, cancel_rx) = oneshot::channel::<Option<&'static str>>();
                        let became_task = Arc::new(std::sync::atomic::AtomicBool::new(false));
                        wt.lock().expect("waiting").insert(key.clone(), Waiting { approval: approval.clone(), cancel: cancel_tx, task: became_task.clone() });
                        let task_ids = task_ids.clone();
                        let tasks = tasks.clone();
                        tokio::spawn(async move {
                            // Set when the call became a task: where its outcome goes, and its id.
                            let task: Mutex<Option<(TaskDone, String)>> = Mutex::new(None);
                            let decide = async {
                                if let Err(why) = pin_gate(&gw, &pins, &tool, &approval).await {
                                    return Outcome::Denied(why);
                                }
                                match resume {
                                    Some((id, answer)) => gw.resume(&id, Some((&tool, &args)), answer.as_ref(), &approval).await.0,
                                    None => gw.gate_asking(&tool, &args, &approval, asker).await,
                                }
                            };
                            // Progress while the call waits, when the client asked for it.
                            let ticker = async {
                                if as_task {
                                    // Once it waits for a human, the call becomes a task.
                                    let mut rx = approval.subscribe();
                                    let _ = rx.wait_for(|h| matches!(h, Hold::Review(_) | Hold::Approval(_))).await.is_ok();
                                    let (done_tx, done_rx) = oneshot::channel();
                                    let (held, wt, key, name) = (approval.clone(), wt.clone(), key.clone(), tool.clone());
                                    let status = held.borrow().describe(&tool);
                                    let t = tasks.spawn(task_options(status), move |tctx| {
                                        Box::pin(task_run(tctx, done_rx, held, name, move || {
                                            let w = wt.lock().expect("waiting").remove(&key);
                                            if let Some(w) = w {
                                                let _ = w.cancel.send(Some("the MCP client cancelled the task"));
                                            }
                                        }))
                                    });
                                    *task.lock().expect("task") = Some((done_tx, t.task_id.clone()));
                                    became_task.store(true, std::sync::atomic::Ordering::SeqCst);
                                    // A task held for an approval is named after it, so that a
                                    // client that lost this connection resumes it from another.
                                    let local = t.task_id.clone();
                                    let mut created = serde_json::to_value(rmcp::model::CreateTaskResult::new(t)).unwrap_or_default();
                                    if let Some(a) = approval.borrow().approval() {
                                        let ext = format!("{TASK_APPROVAL_PREFIX}{a}");
                                        created["taskId"] = json!(ext);
                                        task_ids.lock().expect("task ids").insert(ext, local);
                                    }
                                    let _ = tc.send(reply(&id, Ok(created)));
                                    return std::future::pending::<()>().await;
                                }
                                if progress_token.is_null() {
                                    return std::future::pending::<()>().await;
                                }
                                let mut n = 0u64;
                                loop {
                                    tokio::time::sleep(progress_every).await;
                                    n += 1;
                                    let what = approval.borrow().describe(&tool);
                                    let _ = tc.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                        "params": {"progressToken": progress_token, "progress": n, "message": what}}).to_string());
                                }
                            };
                            let mut why = None;
                            let outcome = tokio::select! {
                                o = decide => Some(o),
                                _ = ticker => None,
                                r = cancel_rx => { why = r.ok().flatten(); None }
                            };
                            wt.lock().expect("waiting").remove(&key);
                            let task = task.lock().expect("task").take();
                            match outcome {
                                None => {
                                    // Cancelled by the client: withdraw the approval; no answer is due.
                                    let held = approval.borrow().approval();
                                    if let (Some(a), Some(why)) = (held, why) {
                                        gw.cancel(&a, why).await;
                                    }
                                    if let Some((done, _)) = task {
                                        let _ = done.send(Err(TaskExit::Cancelled));
                                    }
                                }
                                Some(Outcome::Forward { edited, output_limit, approval_id }) => {
                                    approval.send_replace(Hold::Forwarding);
                                    let run_with = edited.clone().unwrap_or_else(|| args.clone());
                                    let (task, key, msg) = match task {
                                        // The client was answered with the task: the upstream's
                                        // answer comes under an id of the proxy's own.
                                        Some((done, task_id)) => {
                                            let own = json!(format!("assent-task-{task_id}"));
                                            let mut msg = msg;
                                            msg["id"] = own.clone();
                                            (Some(done), own.to_string(), msg)
                                        }
                                        None => (None, key, msg),
                                    };
                                    let renumbered = task.is_some();
                                    fw.lock().expect("forwarded").insert(key, Forwarded {
                                        tool: tool.clone(), arguments: run_with, limit: output_limit, approval_id, task,
                                    });
                                    match edited {
                                        None if !renumbered => { let _ = tu.send(line); }
                                        None => { let _ = tu.send(msg.to_string()); }
                                        Some(edited) => {
                                            let mut msg = msg;
                                            msg["params"]["arguments"] = edited;
                                            tracing::info!(tool, "forwarding the operator's modified arguments");
                                            let _ = tu.send(msg.to_string());
                                        }
                                    }
                                }
                                Some(Outcome::AskClient { approval_id, question }) => {
                                    let _ = tc.send(reply(&id, Ok(era::input_required(&question, &approval_id))));
                                }
                                Some(Outcome::Denied(why)) => {
                                    tracing::info!(tool, reason = %why, "call denied");
                                    match task {
                                        Some((done, _)) => { let _ = done.send(Ok(denied_value(&why))); }
                                        None => { let _ = tc.send(denied_result(&id, &why)); }
                                    }
                                }
                            }
                        });
                    }
                    // A tools/call without an id gets no answer, so it is dropped, never forwarded.
                    (Some("tools/call"), None) => {
                        tracing::warn!("dropped a tools/call notification (no id)");
                    }
                    // The proxy's own tasks: read, cancelled, and (asking for no input) updated here.
                    (Some(m @ ("tasks/get" | "tasks/cancel" | "tasks/update")), Some(id)) => {
                        let ext = msg["params"]["taskId"].as_str().unwrap_or("").to_string();
                        let known = task_ids.lock().expect("task ids").get(&ext).cloned();
                        // A task named after an approval that this process does not know was
                        // made through a connection that is gone: resumed from the gateway.
                        let approval = ext.strip_prefix(TASK_APPROVAL_PREFIX).filter(|a| era::approval_id_ok(a));
                        let local = match (known, approval) {
                            (Some(l), _) => l,
                            (None, Some(a)) if m != "tasks/update" => {
                                let l = resume_task(Resumed {
                                    gw: gw.clone(), pins: pins.clone(), forwarded: forwarded.clone(),
                                    to_upstream: to_upstream.clone(), tasks: tasks.clone(),
                                }, a.to_string());
                                task_ids.lock().expect("task ids").insert(ext.clone(), l.clone());
                                l
                            }
                            _ => ext.clone(),
                        };
                        let r = match m {
                            "tasks/get" => tasks.get_task(&local).map(|t| {
                                let mut v = serde_json::to_value(rmcp::model::GetTaskResult::new(t)).unwrap_or_default();
                                v["taskId"] = json!(ext);
                                v
                            }),
                            "tasks/cancel" => tasks.cancel_task(&local).map(|()| json!({"resultType": "complete"})),
                            _ => tasks.get_task(&local).map(|_| json!({"resultType": "complete"})),
                        };
                        let _ = to_client.send(reply(id, r));
                    }
                    (Some("server/discover"), Some(id)) => match ends.discover(id) {
                        Some(r) => { let _ = to_client.send(reply(id, Ok(r))); }
                        None => { let _ = to_upstream.send(line); }
                    },
                    // The modern revision has no ping: answered here for a legacy client.
                    (Some("ping"), Some(id)) if ends.upstream() == Some(Era::Modern) => {
                        let _ = to_client.send(reply(id, Ok(json!({}))));
                    }
                    (Some("tools/list"), Some(id)) => {
                        list_ids.lock().expect("ids").insert(id.to_string());
                        let _ = to_upstream.send(line);
                    }
                    (Some("notifications/cancelled"), None) => {
                        let key = msg["params"]["requestId"].to_string();
                        let w = waiting.lock().expect("waiting").remove(&key);
                        match w {
                            // Still at the gateway: never forwarded, so the upstream need not know.
                            Some(w) => { let _ = w.cancel.send(Some("the MCP client cancelled the request")); }
                            None => { let _ = to_upstream.send(line); }
                        }
                    }
                    (Some("notifications/initialized"), None) => {
                        // A modern upstream has no handshake to finish.
                        if ends.upstream() != Some(Era::Modern) {
                            let _ = to_upstream.send(line);
                        }
                        // Read the upstream's tools to check them against their pins.
                        ask_pins();
                    }
                    _ => { let _ = to_upstream.send(line); }
                }
            }
            status = child.wait() => {
                let code = status.ok().and_then(|s| s.code()).unwrap_or(1);
                tracing::warn!(code, "upstream MCP server exited");
                let _ = upstream_reader.await;
                drop(to_client);
                let _ = client_writer.await;
                return Ok(code);
            }
        }
    }
    // The client closed stdin: withdraw the approvals it was waiting on, then close the
    // upstream's stdin and let it exit.
    let held: Vec<Waiting> = waiting
        .lock()
        .expect("waiting")
        .drain()
        .map(|(_, w)| w)
        .collect();
    for w in held {
        // A call that became a task outlives the connection: its approval stays, for
        // `tasks/get` through another one.
        if w.task.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        let a = w.approval.borrow().approval();
        if let Some(a) = a {
            gw.cancel(&a, "the MCP client disconnected").await;
        }
        let _ = w.cancel.send(None);
    }
    drop(ask_pins);
    drop(ask);
    drop(to_upstream);
    let code = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(s)) => s.code().unwrap_or(1),
        _ => {
            let _ = child.kill().await;
            1
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), upstream_reader).await;
    drop(to_client);
    let _ = tokio::time::timeout(Duration::from_secs(2), client_writer).await;
    Ok(code)
}
