//! The thin HTTP client of the gateway's `/v1` API the operator commands and `assent watch`
//! use: a base URL, a bearer key, JSON in and out, and a non-2xx answer turned into an error
//! `CODE: message` from the API's error body. It knows no endpoint; the commands name them.
//! (A later step replaces it with the shared `assent-api` client, used by the MCP crate too.)

use crate::args::Remote;
use anyhow::{Result, anyhow};
use serde_json::Value;

/// One gateway (`--url`, trailing `/` dropped) and the operator's bearer key (`--api-key`).
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    /// A client for `r`; fails when no API key is given (`ASSENT_API_KEY`).
    pub(crate) fn new(r: &Remote) -> Result<Self> {
        let key = r
            .api_key
            .clone()
            .ok_or_else(|| anyhow!("ASSENT_API_KEY is not set (an operator's key)"))?;
        Ok(Self {
            http: reqwest::Client::new(),
            base: r.url.trim_end_matches('/').to_string(),
            key,
        })
    }
    /// Sends `req` with the bearer key: the JSON body of a 2xx answer (`Null` when it has
    /// none), else an error `CODE: message`; an unreachable gateway names the URL.
    async fn call(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let resp = req.bearer_auth(&self.key).send().await.map_err(|e| {
            anyhow!(
                "cannot reach the gateway at {} ({})",
                self.base,
                e.without_url()
            )
        })?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            let code = body["code"].as_str().unwrap_or("ERROR");
            let msg = body["message"].as_str().unwrap_or("");
            Err(anyhow!("{code}: {msg}"))
        }
    }
    /// `GET {base}{path}` (path with its query, e.g. `/v1/approvals?status=pending`).
    pub(crate) async fn get(&self, path: &str) -> Result<Value> {
        self.call(self.http.get(format!("{}{path}", self.base)))
            .await
    }
    /// `POST {base}{path}` with the JSON `body`.
    pub(crate) async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }
    /// `DELETE {base}{path}`.
    pub(crate) async fn delete(&self, path: &str) -> Result<Value> {
        self.call(self.http.delete(format!("{}{path}", self.base)))
            .await
    }
}
