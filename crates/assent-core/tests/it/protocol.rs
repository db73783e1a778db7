//! Protocol pieces through the public API: grant scopes on the wire, host and path scope
//! checks, rate windows, and the human summary checked against the canonical arguments.

use assent_core::ToolCall;
use assent_core::approval::GrantScope;
use assent_core::summary::HumanSummary;
use assent_core::triggers::{host_allowed, normalize_lexically};
use serde_json::json;
use std::path::Path;

#[test]
fn grant_scopes_parse_and_print_in_their_largest_unit() {
    for (s, want, wire) in [
        ("once", GrantScope::Once, "once"),
        ("session", GrantScope::Session, "session"),
        ("workspace", GrantScope::Workspace, "workspace"),
        ("15m", GrantScope::Duration(900), "15m"),
        ("90s", GrantScope::Duration(90), "90s"),
        ("120m", GrantScope::Duration(7200), "2h"),
        ("1d", GrantScope::Duration(86_400), "1d"),
    ] {
        let g = GrantScope::parse(s).unwrap();
        assert_eq!((g, g.to_wire().as_str()), (want, wire), "{s}");
    }
    for bad in [
        "",
        "m",
        "0s",
        "15",
        "1w",
        "-5m",
        "367d",
        "99999999999999999999d",
    ] {
        assert!(GrantScope::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn hosts_match_exact_names_and_subdomain_wildcards_only() {
    let allow = vec!["*.example.com".to_string(), "api.test".to_string()];
    assert!(host_allowed("a.example.com", &allow));
    assert!(host_allowed("a.b.example.com", &allow));
    assert!(!host_allowed("example.com", &allow));
    assert!(!host_allowed("badexample.com", &allow));
    assert!(host_allowed("api.test", &allow));
    assert!(!host_allowed("x.api.test", &allow));
    assert!(host_allowed("anything", &["*".to_string()]));
}

#[test]
fn lexical_normalisation_never_climbs_above_the_root() {
    assert_eq!(
        normalize_lexically(Path::new("/a/./b/../c")),
        Path::new("/a/c")
    );
    assert_eq!(
        normalize_lexically(Path::new("/../../etc")),
        Path::new("/etc")
    );
}

#[test]
fn the_summary_is_checked_against_the_canonical_arguments() {
    let call = ToolCall::new("pay", None, json!({"amount": 1e3, "to": "bob"})).unwrap();
    let canonical = call.canonical_arguments().unwrap();
    let s = HumanSummary::generate(&call, &canonical);
    assert_eq!(s.text, "Call `pay` with amount = 1000, to = \"bob\"");
    s.verify(&canonical).unwrap();
    // A summary that shows a value the call does not have fails the check.
    let mut forged = s.clone();
    forged.shown[0].1 = "10".into();
    assert!(
        forged
            .verify(&canonical)
            .unwrap_err()
            .contains("amount = 10")
    );
    let other = ToolCall::new("pay", None, json!({"amount": 5, "to": "bob"})).unwrap();
    assert!(s.verify(&other.canonical_arguments().unwrap()).is_err());
}

/// A rate window too long to represent in milliseconds used to wrap (`u64::MAX` seconds became
/// a window ending in the future, so no earlier call counted) or overflow; it now counts every
/// earlier call, which holds more calls, never fewer.
#[test]
fn a_rate_window_too_long_to_represent_counts_every_earlier_call() {
    use assent_core::triggers::{PriorCall, RateLimit, rate_exceeded};
    let now = 1_700_000_000_000;
    let prior = [PriorCall {
        tool: "t".into(),
        server: None,
        at_ms: now - 1000,
        arguments: json!({}),
    }];
    for per_seconds in [u64::MAX, 1 << 62, i64::MAX as u64] {
        let l = RateLimit {
            max: 1,
            per_seconds,
            per: Default::default(),
        };
        assert!(
            rate_exceeded(&l, prior.iter(), now).is_some(),
            "{per_seconds}"
        );
    }
    let l = RateLimit {
        max: 1,
        per_seconds: 60,
        per: Default::default(),
    };
    assert!(rate_exceeded(&l, prior.iter(), now).is_some());
    assert!(rate_exceeded(&l, prior.iter(), now + 60_000).is_none());
}
