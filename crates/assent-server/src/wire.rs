//! Conversions from `assent-core`'s vocabulary (risk tiers, reasons, approval statuses) to
//! `assent-api`'s, for the bodies the server writes from api types. They go through the
//! values' serde form, which is the same on both sides (`"R2"`, `{"file","rule","text"}`,
//! `"pending"`), so they hold whether or not the api crate re-uses core's types; once it does,
//! most uses can go. The same conversion turns a store row whose serde form is already the
//! wire form (tool states, reviews, pins) into its api type. It writes no body and knows no
//! route.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// `a` as the api type `B` with the same serde form (e.g. a core `RiskTier` as an api
/// `RiskTier`, a core `Vec<Reason>` as an api `Vec<Reason>`). The two forms are one wire
/// format, so this cannot fail for the vocabulary types; should it, the failure is logged and
/// this panics (a programming error, caught by the server's panic layer as a `500`).
pub(crate) fn api<A: Serialize, B: DeserializeOwned>(a: &A) -> B {
    serde_json::to_value(a)
        .and_then(serde_json::from_value)
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "core and api vocabularies differ");
            panic!("core and api vocabularies differ: {e}")
        })
}
