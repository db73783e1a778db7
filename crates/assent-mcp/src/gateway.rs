//! The gateway client of the agent side: a thin client of the assent HTTP API (`/v1`) that
//! proposes a `tools/call` (`POST /v1/tool-calls`), long-polls a held approval, redeems its
//! single-use token for the exact call, relays an in-client answer, cancels a withdrawn
//! approval, reports tool definitions for pinning and reports results. It keeps no state
//! besides its HTTP client and settings, and decides nothing: the gateway does.

use crate::ask::{Asker, UserAnswer, in_client_question};
use crate::kit::{Hold, HoldState, Outcome, PinState, ProxyConfig, text};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// A small client of the assent HTTP API for the agent side.
#[derive(Clone)]
pub struct Gateway {
    http: reqwest::Client,
    cfg: ProxyConfig,
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
