//! The kit of AAEP replies (§6.3.4), shared by [`crate::aaep`] (confirmations, subscriptions)
//! and [`crate::clarify`] (clarifications): the vendored AAEP handshake schemas, the sender
//! check (an authenticated operator on an open subscription of theirs that can reply), the
//! timestamp window, and `Ignored`, why a reply was dropped. It answers no request itself.

use crate::config::Principal;
use crate::state::{AppState, now_ms};
use assent_store::aaep::Subscription;
use assent_store::{Store, StoreError};
use serde_json::Value;
use std::sync::OnceLock;

/// Why a reply was ignored; logged, never told to the sender (§6.3.4).
pub(crate) type Ignored = &'static str;

fn schema(text: &'static str) -> jsonschema::Validator {
    let v: Value = serde_json::from_str(text).expect("vendored schema is JSON");
    jsonschema::options()
        .should_validate_formats(true)
        .build(&v)
        .expect("vendored schema compiles")
}

macro_rules! vendored {
    ($(#[$m:meta])* $name:ident, $path:literal) => {
        $(#[$m])*
        pub(crate) fn $name() -> &'static jsonschema::Validator {
            static V: OnceLock<jsonschema::Validator> = OnceLock::new();
            V.get_or_init(|| schema(include_str!(concat!("../../../spec/aaep/schemas/", $path))))
        }
    };
}
vendored!(
    /// The vendored `subscription.request` schema (§5), formats checked.
    subscription_request,
    "handshake/subscription.request.schema.json"
);
vendored!(
    /// The vendored `confirmation.reply` schema (§6.3).
    confirmation_reply,
    "handshake/confirmation.reply.schema.json"
);
vendored!(
    /// The vendored `clarification.reply` schema (§6.5).
    clarification_reply,
    "handshake/clarification.reply.schema.json"
);

/// Which AAEP reply a message is: what it answers decides its schema.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReplyTo {
    /// A `confirmation.reply` (§6.3).
    Confirmation,
    /// A `clarification.reply` (§6.5).
    Clarification,
}

impl ReplyTo {
    fn schema(self) -> (&'static jsonschema::Validator, Ignored) {
        match self {
            Self::Confirmation => (
                confirmation_reply(),
                "does not match confirmation.reply.schema.json",
            ),
            Self::Clarification => (
                clarification_reply(),
                "does not match clarification.reply.schema.json",
            ),
        }
    }
}

/// The first checks of every AAEP reply (§6.3.4 steps 1–2): `msg` must match the vendored
/// schema of its kind (`Err("does not match ….schema.json")` otherwise), and its
/// `reply_token` must name what `find` looks up in the store (`Err("unknown reply token")`
/// when nothing). Returns the token and what it names; `Err("store")` when the store fails.
pub(crate) async fn replied_to<T, F>(
    st: &AppState,
    msg: &Value,
    kind: ReplyTo,
    find: F,
) -> Result<(String, T), Ignored>
where
    T: Send + 'static,
    F: FnOnce(&Store, &str) -> Result<Option<T>, StoreError> + Send + 'static,
{
    let (schema, mismatch) = kind.schema();
    if !schema.is_valid(msg) {
        return Err(mismatch);
    }
    let token = msg["reply_token"].as_str().unwrap_or("").to_string();
    let t2 = token.clone();
    let found = st
        .store_call(move |s| find(s, &t2))
        .await
        .map_err(|_| "store")?
        .ok_or("unknown reply token")?;
    Ok((token, found))
}

/// Checks the sender of a reply: an authenticated operator, on an open subscription of theirs
/// that can reply (`confirmations`: `supports_confirmation_reply`, else clarifications).
pub(crate) async fn reply_sender(
    st: &AppState,
    p: Option<Principal>,
    msg: &Value,
    confirmations: bool,
) -> Result<(Principal, Subscription), Ignored> {
    let p = p.ok_or("unauthenticated sender")?;
    p.roles().ok_or("sender is not an operator")?;
    let id = msg["subscription_id"].as_str().unwrap_or("").to_string();
    let sub = st
        .store_call(move |s| s.subscription(&id))
        .await
        .map_err(|_| "store")?
        .ok_or("unknown subscription")?;
    if sub.principal != p.name || sub.closed_at.is_some() {
        return Err("subscription is not an open one of the sender");
    }
    let can = if confirmations {
        sub.replies_to_confirmations()
    } else {
        sub.replies_to_clarifications()
    };
    if !can {
        return Err("subscription did not declare it can reply");
    }
    Ok((p, sub))
}

/// Whether the reply's `timestamp` precedes `requested_at + timeout` (§6.3.4 step 4).
pub(crate) fn in_time(msg: &Value, requested_at: i64, expires_at: i64) -> bool {
    let Some(ts) = msg["timestamp"].as_str().and_then(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    }) else {
        return false;
    };
    let ms = (ts.unix_timestamp_nanos() / 1_000_000) as i64;
    ms < expires_at && ms >= requested_at - 60_000 && now_ms() < expires_at
}
