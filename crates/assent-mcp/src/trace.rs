//! Trace context through the MCP side (issue 15 §1): a `tools/call` that carries a W3C
//! `traceparent` in its `_meta` (the MCP convention for trace context) is traced as an
//! `assent.mcp.call` span in that trace; its calls to the gateway carry the span's
//! `traceparent` header ([`assent_api::Client`]), and the call forwarded to the upstream
//! carries the `traceparent` of an `assent.upstream_call` span in its own `_meta`, so that
//! the upstream's spans are children of assent's. With tracing off nothing is added (the
//! client's own `traceparent` and `tracestate` go upstream with the call).

use assent_api::trace::{parent_of, traceparent, valid_traceparent};
use serde_json::{Value, json};
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The span of one `tools/call` of `tool` (as the client named it: [`span_tool`] of it), the
/// child of `_meta.traceparent` of the request's `params` when that is a valid one (else of
/// the current span).
pub fn call_span(tool: &str, params: &Value) -> tracing::Span {
    let span = tracing::info_span!(
        "assent.mcp.call",
        otel.name = "assent.mcp.call",
        otel.kind = "server",
        assent.tool = span_tool(tool).as_str(),
        assent.approval_id = Empty,
    );
    if let Some(tp) = params["_meta"]["traceparent"]
        .as_str()
        .filter(|t| valid_traceparent(t))
    {
        let _ = span.set_parent(parent_of(tp));
    }
    span
}

/// The span of forwarding the cleared call of `tool` to its upstream (a child of the current
/// span), with the approval it ran under.
pub fn upstream_span(tool: &str, approval_id: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "assent.step",
        otel.name = "assent.upstream_call",
        otel.kind = "client",
        assent.tool = tool,
        assent.approval_id = approval_id.unwrap_or(""),
    )
}

/// Sets `_meta.traceparent` of request params `params` to `span`'s; `false` (nothing
/// changed) when `span` is in no trace or `params` is not an object.
pub fn stamp(params: &mut Value, span: &tracing::Span) -> bool {
    let Some(tp) = traceparent(span) else {
        return false;
    };
    let Value::Object(p) = params else {
        return false;
    };
    let meta = p.entry("_meta").or_insert_with(|| json!({}));
    match meta {
        Value::Object(m) => {
            m.insert("traceparent".into(), Value::String(tp));
            m.remove("tracestate");
            true
        }
        _ => false,
    }
}

/// The most characters of a client's tool name a span carries (the gateway refuses a name over
/// 256 bytes anyway).
const MAX_SPAN_TOOL_CHARS: usize = 256;

/// `tool` as a span attribute: one plain line of at most [`MAX_SPAN_TOOL_CHARS`] characters.
/// Found by review: the call span took the client's tool name before any check, so a name of
/// up to 16 MiB (the longest line a client may send) with newlines rode on every log line in
/// the call and on each exported span.
fn span_tool(tool: &str) -> String {
    assent_core::template::plain_line(tool, MAX_SPAN_TOOL_CHARS, "…")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_spans_tool_name_is_one_short_plain_line() {
        assert_eq!(super::span_tool("pay"), "pay");
        let forged = format!("pay\n2026 INFO forged\u{1b}[2J{}", "x".repeat(1 << 20));
        let t = super::span_tool(&forged);
        assert!(t.chars().count() <= 257 && t.ends_with('…'), "{}", t.len());
        assert!(!t.contains('\n') && !t.contains('\u{1b}'), "{t}");
    }
}
