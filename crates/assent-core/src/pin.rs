//! MCP tool-list pinning records (issue 4): what the gateway says of one advertised tool
//! ([`ToolState`], [`PinState`]), a review of a changed or new tool ([`ToolReview`],
//! [`ReviewStatus`]) and a pinned tool ([`ToolPin`]). One type each for the row the store
//! reads back and the body `/v1/tools/…` returns: times are Unix milliseconds in Rust and
//! RFC 3339 text on the wire ([`crate::stamp`]); tool definitions stay `serde_json::Value`
//! (they are the upstream's). Fingerprinting, pinning and deciding reviews are the store's.

use crate::json::present;
use crate::stamp::{ms_as_rfc3339, opt_ms_as_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the gateway says of one advertised tool (`POST /v1/tools/check`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolState {
    /// The tool name.
    pub name: String,
    /// Pinned, first use or held.
    pub state: PinState,
    /// The review of a held tool.
    pub review_id: Option<String>,
    /// The review's status, for a held tool.
    pub review_status: Option<ReviewStatus>,
    /// The pinned definition (what `tools/list` may show); `null` for a tool never pinned.
    pub pinned: Option<Value>,
}

/// `"pinned"` (matches its pin), `"first_use"` (pinned now: the server was new) or `"held"`
/// (changed or new since the server was pinned; a review decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PinState {
    /// Matches its pin.
    Pinned,
    /// Pinned now, trust on first use.
    FirstUse,
    /// Waits for an operator's review.
    Held,
}

impl PinState {
    /// `"pinned"`, `"first_use"` or `"held"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pinned => "pinned",
            Self::FirstUse => "first_use",
            Self::Held => "held",
        }
    }
}

/// `"pending"`, `"accepted"` or `"rejected"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ReviewStatus {
    /// Waiting for an operator.
    Pending,
    /// Accepted: the new definition is the pin.
    Accepted,
    /// Rejected: the tool stays hidden.
    Rejected,
}

impl ReviewStatus {
    /// `"pending"`, `"accepted"` or `"rejected"`, as on the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
        }
    }

    /// The status named `s`; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Accepted, Self::Rejected]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One review of a changed or new tool (`GET /v1/tools/reviews/{id}[?wait=S]`, and the answer
/// to `POST …/accept` and `…/reject`, which are `409 ALREADY_DECIDED` after the first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolReview {
    /// Review id, UUID v4.
    pub id: String,
    /// Whose it is: the agent whose own MCP relay reported it (`POST /v1/tools/check`), the
    /// only agent it concerns; `null`: the gateway's own MCP hub (the upstreams of its config),
    /// which holds and shows it for every agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// The MCP server alias.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// Fingerprint (SHA-256 hex) of the new definition.
    pub fingerprint: String,
    /// The new definition.
    pub definition: Value,
    /// The pinned definition it would replace, `null` for a new tool.
    pub pinned: Option<Value>,
    /// Where it stands (`rejected` when the stored value is unreadable: fail closed).
    pub status: ReviewStatus,
    /// When the proxy saw it: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub seen_at: i64,
    /// The agent whose proxy saw it.
    pub seen_by: String,
    /// The operator who decided.
    pub decided_by: Option<String>,
    /// When: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "opt_ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub decided_at: Option<i64>,
    /// RFC 6902 patch from `pinned` to `definition`; present only when `pinned` is (the
    /// gateway adds it to what it shows; the stored row has none).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub diff: Option<Value>,
}

/// A pinned tool (`GET /v1/tools/pins`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolPin {
    /// Whose it is: the agent whose own MCP relay reported it (`POST /v1/tools/check`), the
    /// only agent it concerns; `null`: the gateway's own MCP hub (the upstreams of its config),
    /// which holds and shows it for every agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// The MCP server alias.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// Fingerprint (SHA-256 hex) of its definition.
    pub fingerprint: String,
    /// Its definition.
    pub definition: Value,
    /// When it was pinned: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub pinned_at: i64,
    /// `trust-on-first-use`, or the operator who accepted it.
    pub pinned_by: String,
}

/// The name an MCP server's own words are pinned under, beside its tools: the `instructions`
/// and `serverInfo` its `initialize` answer gives (a `server/discover` answer's `instructions`
/// and `_meta` server info). Clients hand the instructions to the model as they do a tool's
/// description, and show the server's name and title to the user, so an upstream that changes
/// them is held for an operator exactly as a changed tool is ([`server_entry`]). Not a tool
/// name the gateway takes in a tool list, so no tool can stand for it.
pub const SERVER_ENTRY: &str = "(server)";

/// The pseudo-definition pinned under [`SERVER_ENTRY`] for a server's `instructions` and
/// `serverInfo` (each as the upstream gave it, `None` when it gave none):
/// `{"name": "(server)", "instructions"?, "serverInfo"?: {"name"?, "title"?, "description"?,
/// "websiteUrl"?, "icons"?}}`. Kept are the instructions when they are text, and of the server
/// info every field a client may show or fetch — its texts when they are text, its icons as
/// [`icons`] reads them — but its `version`: that changes with every release of the server,
/// and a review of each would teach operators to accept without reading (what may pass of it
/// is the proxies' to bound). Fields of other shapes and unknown fields are left out, so the
/// hub (rmcp's `Implementation`) and a relay (the upstream's JSON) make one entry of one
/// server's words, and the proxies show only what is pinned. Reading an entry again gives it
/// back unchanged.
pub fn server_entry(instructions: Option<&Value>, server_info: Option<&Value>) -> Value {
    let mut entry = serde_json::Map::new();
    entry.insert("name".into(), Value::String(SERVER_ENTRY.into()));
    if let Some(text) = instructions.filter(|i| i.is_string()) {
        entry.insert("instructions".into(), text.clone());
    }
    if let Some(info) = server_info.and_then(Value::as_object) {
        let mut kept = serde_json::Map::new();
        for k in ["name", "title", "description", "websiteUrl"] {
            if let Some(v) = info.get(k).filter(|v| v.is_string()) {
                kept.insert(k.into(), v.clone());
            }
        }
        let icons = icons(info.get("icons"));
        if !icons.is_empty() {
            kept.insert("icons".into(), Value::Array(icons));
        }
        entry.insert("serverInfo".into(), Value::Object(kept));
    }
    Value::Object(entry)
}

/// A tool's or a server's `icons` as a pin covers them: each icon's `src`, `mimeType`, `theme`
/// (strings) and `sizes` (strings), the fields rmcp's `Icon` keeps, so the hub and a relay
/// fingerprint one definition alike; an icon of another shape (rmcp refuses it, so only a
/// relay forwards it) and an `icons` that is not a list count as they are (found by review of
/// a form that left them out, and the relay forwarded them unreviewed). Found by review: the
/// icons were not covered, so an upstream could point a reviewed tool's icon at a URL of its
/// own (each client showing the tool fetches it) with no review.
pub fn icons(icons: Option<&Value>) -> Vec<Value> {
    let list = match icons {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(list)) => list,
        Some(other) => return vec![other.clone()],
    };
    list.iter().map(icon).collect()
}

/// One icon of [`icons`]: rmcp's fields when it has their shape, else as it is.
fn icon(v: &Value) -> Value {
    let text = |k: &str| v.get(k).is_none_or(|x| x.is_string() || x.is_null());
    let sizes = v.get("sizes").is_none_or(|x| {
        x.is_null() || x.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    });
    let shaped = v.get("src").is_some_and(Value::is_string)
        && text("mimeType")
        && v.get("theme")
            .is_none_or(|t| t.is_null() || t == "light" || t == "dark")
        && sizes;
    if !shaped {
        return v.clone();
    }
    let mut kept = serde_json::Map::new();
    for k in ["src", "mimeType", "theme", "sizes"] {
        if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
            kept.insert(k.to_string(), x.clone());
        }
    }
    Value::Object(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_back_what_they_write_and_nothing_else() {
        for s in [
            ReviewStatus::Pending,
            ReviewStatus::Accepted,
            ReviewStatus::Rejected,
        ] {
            assert_eq!(ReviewStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ReviewStatus::parse("Pending"), None);
        assert_eq!(ReviewStatus::parse(""), None);
    }

    /// The hub reads a server's words through rmcp (nulls and unknown fields dropped), a relay
    /// as the upstream wrote them: one entry either way, without the version, and read again
    /// it is the same.
    #[test]
    fn a_servers_words_make_one_entry_as_the_hub_and_a_relay_read_them() {
        let hub = server_entry(
            Some(&serde_json::json!("Use read first.")),
            Some(
                &serde_json::json!({"name": "up", "title": "Up", "version": "1.2.0",
                "icons": [{"src": "https://a.example/i.png"}]}),
            ),
        );
        let relay = server_entry(
            Some(&serde_json::json!("Use read first.")),
            Some(
                &serde_json::json!({"name": "up", "title": "Up", "version": "9",
                "description": null, "x-vendor": 1,
                "icons": [{"src": "https://a.example/i.png", "theme": null, "x": 2}]}),
            ),
        );
        assert_eq!(hub, relay);
        assert_eq!(hub["name"], SERVER_ENTRY);
        assert!(hub["serverInfo"].get("version").is_none(), "{hub}");
        let again = server_entry(hub.get("instructions"), hub.get("serverInfo"));
        assert_eq!(again, hub);
        // Instructions that are not text are no instructions; nor is such a server info.
        let odd = server_entry(
            Some(&serde_json::json!(["do this"])),
            Some(&serde_json::json!("up")),
        );
        assert_eq!(odd, serde_json::json!({"name": SERVER_ENTRY}));
    }
}
