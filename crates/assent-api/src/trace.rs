//! W3C Trace Context (issue 15 §1) between assent's processes and its protocols: the
//! `traceparent` of a span, the context a `traceparent` names, and the MPLP trace id made
//! from one. Used by the server (request spans, AAEP `correlation_id`, MPLP `trace_id`), by
//! the MCP proxy and hub (`_meta.traceparent` in, to the gateway and to upstreams), and by
//! [`crate::Client`], which sends the current span's `traceparent` with every request. With
//! tracing off (no OpenTelemetry layer, the no-op global propagator) every function here
//! finds no context and nothing is sent.

use opentelemetry::propagation::{Extractor, Injector};
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C `traceparent` of `span` (`00-<trace-id>-<span-id>-<flags>`), or `None` when it is
/// not in a trace (tracing is off).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let mut carrier = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut Carrier(&mut carrier))
    });
    carrier
        .remove("traceparent")
        .filter(|t| valid_traceparent(t))
}

/// The context that `traceparent` names (an empty one when it is malformed or tracing is
/// off), to make a span its child.
pub fn parent_of(traceparent: &str) -> opentelemetry::Context {
    let mut carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Carrier(&mut carrier)))
}

/// An MPLP trace id (a lowercase UUID v4, as MPLP identifiers must be) made from the W3C
/// trace id of `traceparent`: its 32 hex digits in 8-4-4-4-12 groups, with the version digit
/// set to `4` and the variant bits to `10` — so 6 of its 128 bits are overwritten; the exact
/// W3C trace id travels in the AAEP `correlation_id`. `None` for a malformed `traceparent`.
pub fn mplp_trace_id(traceparent: &str) -> Option<String> {
    if !valid_traceparent(traceparent) {
        return None;
    }
    let h = traceparent.get(3..35)?.as_bytes();
    let variant = b"89ab"[(char::from(h[16]).to_digit(16)? & 3) as usize];
    let mut out = String::with_capacity(36);
    for (i, &c) in h.iter().enumerate() {
        if matches!(i, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(match i {
            12 => '4',
            16 => char::from(variant),
            _ => char::from(c),
        });
    }
    Some(out)
}

/// Whether `t` is `00-<32 lowercase hex, not all 0>-<16 lowercase hex, not all 0>-<2 hex>`
/// (W3C Trace Context §3.2, version 00).
pub fn valid_traceparent(t: &str) -> bool {
    let parts: Vec<&str> = t.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            && s.bytes().any(|b| b != b'0')
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && parts[3].len() == 2
        && parts[3].bytes().all(|b| b.is_ascii_hexdigit())
}

/// A map of header names to values as [`Extractor`] and [`Injector`].
struct Carrier<'a>(&'a mut HashMap<String, String>);

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

impl Injector for Carrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mplp_trace_id_is_a_uuid_v4_made_of_the_w3c_trace_id() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            mplp_trace_id(tp).as_deref(),
            Some("4bf92f35-77b3-4da6-a3ce-929d0e0e4736")
        );
        let tp = "00-4bf92f3577b3ada6f3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            mplp_trace_id(tp).as_deref(),
            Some("4bf92f35-77b3-4da6-b3ce-929d0e0e4736")
        );
    }

    #[test]
    fn malformed_traceparents_make_no_trace_id() {
        for tp in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(mplp_trace_id(tp), None, "{tp}");
        }
    }
}
