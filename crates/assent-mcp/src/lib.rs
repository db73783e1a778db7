//! assent-mcp: an MCP stdio proxy that puts the assent gateway in front of one MCP server.
//!
//! The client speaks MCP (newline-delimited JSON-RPC 2.0) to the proxy on stdin/stdout; the
//! proxy runs the upstream server as a child process and relays every message unchanged,
//! except:
//! - `tools/call` requests go to the gateway first (`POST /v1/tool-calls`). An allowed call is
//!   forwarded; a held call waits (long-polling the approval) and is forwarded only after its
//!   approval token was redeemed for the exact call; anything else — denied, rejected, expired
//!   without an approving default, cancelled, or the gateway unreachable — is answered with a
//!   tool result `isError: true` whose text starts `TOOL_DENIED:`, and never forwarded.
//! - a forwarded call's result larger than the `thresholds.output_bytes` of the rules covering
//!   the call (the JSON of its `result`) is held before it reaches the client: the proxy
//!   reports it (`POST /v1/tool-results`), waits for an operator like for a held call, and
//!   relays it only after the approval's token was redeemed for that exact result (its
//!   SHA-256); otherwise the client gets `TOOL_DENIED: result withheld …`.
//! - `tools/list` results are filtered to the tools the agent file declares for the server
//!   alias when it lists `allowed_tools`.
//! - JSON-RPC batches are refused (a batch could hide a `tools/call`), and so is a line that is
//!   not JSON (a more lenient upstream parser could find a `tools/call` in it), and a
//!   `tools/call` without an id is dropped.
//!
//! It is a client of the assent server, not a second policy engine: it holds no policy and
//! fails closed when it cannot ask. The relay is hand-written rather than built on rmcp
//! because it must pass every other message through byte for byte, whatever protocol version
//! the two ends negotiate.

#![warn(missing_docs)]

use anyhow::Context;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

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
    },
    /// Answer the client with `TOOL_DENIED: reason`.
    Denied(String),
}

/// A small client of the assent HTTP API for the agent side.
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

    /// Runs one call through the gateway: propose, wait for a human if held, redeem the token.
    pub async fn gate(&self, tool: &str, arguments: &Value) -> Outcome {
        match self.gate_inner(tool, arguments).await {
            Ok(o) => o,
            Err(e) => Outcome::Denied(e),
        }
    }

    async fn gate_inner(&self, tool: &str, arguments: &Value) -> Result<Outcome, String> {
        let body = json!({"agent": self.cfg.agent, "session_id": self.cfg.session_id,
                          "tool": tool, "server": self.cfg.server, "arguments": arguments});
        let (status, b) = self
            .send(self.http.post(self.url("/v1/tool-calls")).json(&body))
            .await?;
        let text = |b: &Value, k: &str| b[k].as_str().unwrap_or("").to_string();
        match (status, b["decision"].as_str()) {
            // Covered by a grant: it still carries a single-use token to redeem.
            (200, Some("allow")) if b["token"].is_string() => {
                let limit = b["output_bytes"].as_u64();
                return self
                    .redeem(&text(&b, "token"), tool, arguments, None, limit)
                    .await;
            }
            (200, Some("allow")) => {
                return Ok(Outcome::Forward {
                    edited: None,
                    output_limit: b["output_bytes"].as_u64(),
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
        tracing::info!(approval_id = %id, tool, "call held for approval");
        let rec = match self.wait(&id).await? {
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
        self.redeem(token, tool, run_with, edited.clone(), limit)
            .await
    }

    /// Long-polls approval `id` until it leaves `pending`: `Ok(Ok(record))`, or
    /// `Ok(Err(why))` when it cannot be read.
    async fn wait(&self, id: &str) -> Result<Result<Value, String>, String> {
        let text = |b: &Value, k: &str| b[k].as_str().unwrap_or("").to_string();
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

    /// Whether a forwarded call's `result` (its JSON text, `output_bytes` long) may reach the
    /// client: within the threshold it is released at once; over it an operator decides, and
    /// it is released only after the approval's token was redeemed for this exact result.
    /// `Err(why)` when it is withheld.
    pub async fn release(&self, tool: &str, arguments: &Value, result: &str) -> Result<(), String> {
        use sha2::Digest;
        let hash = hex::encode(sha2::Sha256::digest(result.as_bytes()));
        let preview: String = result.chars().take(2048).collect();
        let body = json!({"agent": self.cfg.agent, "session_id": self.cfg.session_id, "tool": tool,
                          "server": self.cfg.server, "arguments": arguments,
                          "output_bytes": result.len(), "result_sha256": hash, "preview": preview});
        let text = |b: &Value, k: &str| b[k].as_str().unwrap_or("").to_string();
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
    ) -> Result<Outcome, String> {
        let text = |b: &Value, k: &str| b[k].as_str().unwrap_or("").to_string();
        let body = json!({"token": token, "tool": tool, "server": self.cfg.server, "arguments": arguments});
        match self
            .send(self.http.post(self.url("/v1/tokens/redeem")).json(&body))
            .await?
        {
            (200, _) => Ok(Outcome::Forward {
                edited,
                output_limit,
            }),
            (s, r) => Ok(Outcome::Denied(format!(
                "approval token refused ({s} {}: {})",
                text(&r, "code"),
                text(&r, "message")
            ))),
        }
    }
}

/// A forwarded call whose result is capped: its tool, the arguments it ran with, the limit.
type Capped = (String, Value, u64);

fn denied_result(id: &Value, reason: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "content": [{"type": "text", "text": format!("TOOL_DENIED: {reason}")}],
        "isError": true,
    }})
    .to_string()
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
    let mut child_in = child.stdin.take().context("upstream stdin")?;
    let child_out = child.stdout.take().context("upstream stdout")?;
    let gw = Arc::new(Gateway::new(cfg)?);
    let list_ids: Arc<Mutex<HashSet<String>>> = Arc::default();
    // Forwarded calls whose result is capped: request id → (tool, arguments run, limit).
    let capped: Arc<Mutex<HashMap<String, Capped>>> = Arc::default();

    // One writer per direction, so concurrent tasks never interleave lines.
    let (to_client, mut client_rx) = mpsc::unbounded_channel::<String>();
    let (to_upstream, mut upstream_rx) = mpsc::unbounded_channel::<String>();
    let client_writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(line) = client_rx.recv().await {
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = out.flush().await;
        }
    });
    tokio::spawn(async move {
        while let Some(line) = upstream_rx.recv().await {
            if child_in.write_all(line.as_bytes()).await.is_err()
                || child_in.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = child_in.flush().await;
        }
        // Dropping child_in closes the upstream's stdin.
    });

    // Upstream → client.
    let declared = gw.declared_tools().await;
    let ids = list_ids.clone();
    let tc = to_client.clone();
    let caps = capped.clone();
    let gw_results = gw.clone();
    let upstream_reader = tokio::spawn(async move {
        let mut lines = BufReader::new(child_out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            // A capped call's response: over the limit, an operator decides before it passes.
            let capped_call = serde_json::from_str::<Value>(&line).ok().and_then(|v| {
                if v.get("method").is_some() {
                    return None;
                }
                let key = v.get("id")?.to_string();
                let entry = caps.lock().expect("caps").remove(&key)?;
                Some((v, entry))
            });
            if let Some((v, (tool, args, limit))) = capped_call {
                let result = v.get("result").map(Value::to_string).unwrap_or_default();
                if result.len() as u64 > limit {
                    let (gw, tc) = (gw_results.clone(), tc.clone());
                    tokio::spawn(async move {
                        let out = match gw.release(&tool, &args, &result).await {
                            Ok(()) => line,
                            Err(why) => {
                                tracing::info!(tool, reason = %why, "result withheld");
                                denied_result(&v["id"], &format!("result withheld: {why}"))
                            }
                        };
                        let _ = tc.send(out);
                    });
                    continue;
                }
            }
            let out = match (&declared, serde_json::from_str::<Value>(&line)) {
                (Some(allowed), Ok(mut v))
                    if v.get("id").is_some() && v.get("method").is_none() =>
                {
                    let key = v["id"].to_string();
                    if ids.lock().expect("ids").remove(&key) {
                        if let Some(tools) = v["result"]["tools"].as_array_mut() {
                            tools.retain(|t| {
                                t["name"]
                                    .as_str()
                                    .is_some_and(|n| allowed.iter().any(|a| a == n))
                            });
                        }
                        v.to_string()
                    } else {
                        line
                    }
                }
                _ => line,
            };
            if tc.send(out).is_err() {
                break;
            }
        }
    });

    // Client → upstream.
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Ok(Some(line)) = line else { break };
                if line.trim().is_empty() { continue; }
                // Fail closed: a line we cannot parse is never forwarded, since a more lenient
                // upstream parser might read a tools/call in it that was never gated.
                let msg: Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = to_client.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("assent: parse error: {e}")}}).to_string());
                        continue;
                    }
                };
                if msg.is_array() {
                    let _ = to_client.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "assent: JSON-RPC batches are not supported"}}).to_string());
                    continue;
                }
                match (msg["method"].as_str(), msg.get("id")) {
                    (Some("tools/call"), Some(id)) => {
                        let id = id.clone();
                        let tool = msg["params"]["name"].as_str().unwrap_or("").to_string();
                        let args = match &msg["params"]["arguments"] { Value::Null => json!({}), a => a.clone() };
                        let (gw, tc, tu) = (gw.clone(), to_client.clone(), to_upstream.clone());
                        let caps = capped.clone();
                        tokio::spawn(async move {
                            match gw.gate(&tool, &args).await {
                                Outcome::Forward { edited, output_limit } => {
                                    let run_with = edited.clone().unwrap_or_else(|| args.clone());
                                    if let Some(limit) = output_limit {
                                        caps.lock().expect("caps").insert(id.to_string(), (tool.clone(), run_with, limit));
                                    }
                                    match edited {
                                        None => { let _ = tu.send(line); }
                                        Some(edited) => {
                                            let mut msg = msg;
                                            msg["params"]["arguments"] = edited;
                                            tracing::info!(tool, "forwarding the operator's modified arguments");
                                            let _ = tu.send(msg.to_string());
                                        }
                                    }
                                }
                                Outcome::Denied(why) => {
                                    tracing::info!(tool, reason = %why, "call denied");
                                    let _ = tc.send(denied_result(&id, &why));
                                }
                            }
                        });
                    }
                    // A tools/call without an id gets no answer, so it is dropped, never forwarded.
                    (Some("tools/call"), None) => {
                        tracing::warn!("dropped a tools/call notification (no id)");
                    }
                    (Some("tools/list"), Some(id)) => {
                        list_ids.lock().expect("ids").insert(id.to_string());
                        let _ = to_upstream.send(line);
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
    // The client closed stdin: close the upstream's stdin and let it exit.
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
