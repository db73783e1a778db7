//! Conversions to `assent-api` types from values whose serde form already is the wire form
//! but whose Rust type differs: store rows (tool states, reviews, pins, a grant's stored tier
//! and scope), core types the api keeps its own copy of (`Escalation`, which a client reads
//! leniently; a `GrantScope` written as its string) and a clarification's
//! status. The shared vocabulary (`RiskTier`, `ApprovalStatus`, `DecisionKind`,
//! `DefaultDecision`, `Reason`, `Settlement`) is one type in both crates and needs no conversion. It writes
//! no body and knows no route.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// `a` as the api type `B` with the same serde form (e.g. a core `RiskTier` as an api
/// `RiskTier`, a core `Vec<Reason>` as an api `Vec<Reason>`). The two forms are one wire
/// format, so this cannot fail for the vocabulary types; should it, the failure is logged and
/// this panics (a programming error, caught by the server's panic layer as a `500`). Debug
/// builds (the tests) also check that `B` writes back exactly what `a` wrote, so no field is
/// dropped on the way.
pub(crate) fn api<A: Serialize, B: Serialize + DeserializeOwned>(a: &A) -> B {
    let convert = || -> serde_json::Result<(serde_json::Value, B)> {
        let v = serde_json::to_value(a)?;
        let b = serde_json::from_value(v.clone())?;
        Ok((v, b))
    };
    let (v, b) = convert().unwrap_or_else(|e| {
        tracing::error!(error = %e, "core and api vocabularies differ");
        panic!("core and api vocabularies differ: {e}")
    });
    debug_assert_eq!(serde_json::to_value(&b).ok(), Some(v), "a field was lost");
    b
}
