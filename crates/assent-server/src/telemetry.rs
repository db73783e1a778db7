//! Traces of requests and of the approval's life cycle (issue 15 §1), as `tracing` spans that
//! the binary exports over OTLP when `OTEL_EXPORTER_OTLP_*` is set (`assent` `setup.rs`);
//! without an exporter they cost one span per request and carry no context.
//!
//! - Every request is a server span `METHOD /route` (`http.request.method`, `http.route`,
//!   `http.response.status_code`; a method HTTP does not define is `_OTHER`, its span
//!   `HTTP /route`, at most 32 bytes of it as `http.request.method_original`), a child of the W3C `traceparent` (and `tracestate`) the
//!   caller sent, read with the global propagator (W3C Trace Context when tracing is on).
//! - Each step of an approval's life is a span named for it — `assent.propose`,
//!   `assent.wait`, `assent.decision`, `assent.redeem`, `assent.result`, and the MCP side's
//!   `assent.upstream_call` — carrying those of `assent.approval_id`, `assent.call_hash`,
//!   `assent.verdict`, `assent.agent`, `assent.tool` and `assent.risk_tier` the step knows
//!   (`assent.propose` all; the others fewer, docs/operations.md). A held approval
//!   keeps the `traceparent` of its `assent.propose` span (store column `traceparent`), and
//!   a decision — a person's, on whichever surface, or the default at expiry — is a span in
//!   that trace, linked to the request that made it: one trace shows the call from proposal
//!   to decision.
//! - The trace id reaches the protocols: AAEP envelopes of a traced approval carry its
//!   `traceparent` as `correlation_id` (AAEP §3, W3C Trace Context), and a proposal without
//!   an MPLP `trace_id` of its own gets one made from the W3C trace id ([`mplp_trace_id`]).

pub use assent_api::trace::{mplp_trace_id, parent_of, traceparent};
use assent_store::ApprovalRecord;
use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TraceContextExt;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The steps of an approval's life that get a span of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A call (or delegation, Confirm target) proposed and given its verdict.
    Propose,
    /// An agent's long-poll on its approval.
    Wait,
    /// A person's decision, or the default decision at expiry.
    Decision,
    /// A token redeemed for its call.
    Redeem,
    /// A held tool result released or withheld.
    Result,
    /// The MCP proxy forwarding an allowed call to its upstream.
    UpstreamCall,
}

impl Step {
    /// The span's name (`assent.propose`, …).
    pub fn name(self) -> &'static str {
        match self {
            Step::Propose => "assent.propose",
            Step::Wait => "assent.wait",
            Step::Decision => "assent.decision",
            Step::Redeem => "assent.redeem",
            Step::Result => "assent.result",
            Step::UpstreamCall => "assent.upstream_call",
        }
    }
}

/// A span for `step` with the approval attributes declared (empty until recorded with
/// [`record_approval`] or [`record`]).
pub fn step_span(step: Step) -> tracing::Span {
    tracing::info_span!(
        "assent.step",
        otel.name = step.name(),
        assent.approval_id = Empty,
        assent.call_hash = Empty,
        assent.verdict = Empty,
        assent.agent = Empty,
        assent.tool = Empty,
        assent.risk_tier = Empty,
        assent.outcome = Empty,
    )
}

/// Records `value` as attribute `field` (one of those [`step_span`] declares) on `span`.
pub fn record(span: &tracing::Span, field: &'static str, value: &str) {
    span.record(field, value);
}

/// Records approval `a`'s id, `call_hash`, agent, tool and risk tier on `span`.
pub fn record_approval(span: &tracing::Span, a: &ApprovalRecord) {
    span.record("assent.approval_id", a.id.as_str());
    span.record("assent.call_hash", a.call_hash.as_str());
    span.record("assent.agent", a.agent.as_str());
    span.record("assent.tool", a.call.tool.as_str());
    span.record("assent.risk_tier", a.terms.risk_tier.as_str());
}

/// A [`Step::Decision`] span for approval `a` in the approval's own trace (its stored
/// `traceparent`, when it has one), linked to the current span (the request that decided).
pub fn decision_span(a: &ApprovalRecord) -> tracing::Span {
    let span = step_span(Step::Decision);
    let here = tracing::Span::current().context();
    if let Some(tp) = &a.traceparent {
        let _ = span.set_parent(parent_of(tp));
        let sc = here.span().span_context().clone();
        if sc.is_valid() {
            span.add_link(sc);
        }
    }
    record_approval(&span, a);
    span.record("assent.outcome", a.status.as_str());
    span
}

/// Approval `a` was settled (a person's decision, a cancellation, the default at expiry):
/// counted in `metrics` and traced as a [`Step::Decision`] span in the approval's trace.
pub fn settled(metrics: &crate::metrics::Metrics, a: &ApprovalRecord) {
    metrics.decided(a);
    let _ = decision_span(a);
}

/// The edge layer that makes every request a server span, the child of the caller's
/// `traceparent`, named `METHOD /route` with its status recorded.
pub async fn trace_request(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_string();
    let method = known_method(req.method());
    let span = tracing::info_span!(
        "request",
        otel.name = format!("{} {route}", method.unwrap_or("HTTP")),
        otel.kind = "server",
        http.request.method = method.unwrap_or("_OTHER"),
        http.request.method_original = Empty,
        http.route = %route,
        http.response.status_code = Empty,
    );
    if method.is_none() {
        let original = req.method().as_str();
        // A method is ASCII (RFC 9110 `token`), so any byte is a boundary.
        let cut = &original[..original.len().min(MAX_METHOD_ORIGINAL_BYTES)];
        span.record("http.request.method_original", cut);
    }
    let parent = opentelemetry::global::get_text_map_propagator(|p| {
        p.extract(&HeaderCarrier(req.headers()))
    });
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    let resp = next.run(req).instrument(span.clone()).await;
    span.record(
        "http.response.status_code",
        i64::from(resp.status().as_u16()),
    );
    resp
}

/// The span name and `http.request.method` of a request's method when it is one HTTP
/// defines (OpenTelemetry HTTP semantic conventions: any other is `_OTHER`, its span named
/// `HTTP {route}`). Attack (found by review): a client with no key sent a made-up method of
/// 60 KB, allowed by HTTP and cut only by the 64 KiB head limit, and each such request put a
/// span of that size, with a name of its own, into the export queue ahead of the approvals'.
fn known_method(m: &axum::http::Method) -> Option<&'static str> {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    // Methods are case-sensitive: `get` is a method of its own, not `GET`.
    KNOWN.into_iter().find(|k| *k == m.as_str())
}

/// Most bytes of a made-up method kept as `http.request.method_original`.
const MAX_METHOD_ORIGINAL_BYTES: usize = 32;

/// Longest `tracestate` taken from a request, in bytes, and most list members (W3C Trace
/// Context §3.3: 512 characters and 32 members are what a vendor must be able to carry); a
/// longer one is ignored, so a caller cannot make every span of its trace carry a large header
/// into the export queue.
const MAX_TRACESTATE_BYTES: usize = 512;
/// See [`MAX_TRACESTATE_BYTES`].
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// Request headers as an OpenTelemetry [`Extractor`] (`tracestate` bounded).
struct HeaderCarrier<'a>(&'a HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let v = self.0.get(key).and_then(|v| v.to_str().ok())?;
        if key.eq_ignore_ascii_case("tracestate")
            && (v.len() > MAX_TRACESTATE_BYTES || v.split(',').count() > MAX_TRACESTATE_MEMBERS)
        {
            return None;
        }
        Some(v)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
