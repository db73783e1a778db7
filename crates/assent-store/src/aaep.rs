//! AAEP producer side (chapters 3, 5, 6), the stored types: subscriptions and stored events
//! (clarifications are `assent-core`'s record). Storing subscriptions and clarifications is `subscriptions.rs` and
//! `clarifications.rs`; what an event reports is `events.rs` ([`crate::events::AaepEvent`]).
//! The envelopes themselves are not built here: `assent-server`'s `envelopes` module renders
//! them, and the store writes the rendered event to `aaep_events` in the same transaction as
//! the state change it reports, so an event is never sent for something that did not happen,
//! and a subscriber that reconnects with `Last-Event-ID` misses nothing. `sequence_number` is
//! the row's `seq`, added when the event is read.

use serde_json::Value;

/// A stored subscription.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    /// `sub_…`.
    pub id: String,
    /// The operator who opened it.
    pub principal: String,
    /// `subscriber_id` of the request.
    pub subscriber_id: String,
    /// `honored_capabilities`.
    pub honored: Value,
    /// Events with a larger `seq` are delivered.
    pub start_seq: i64,
    /// Unix milliseconds of closing.
    pub closed_at: Option<i64>,
}

impl Subscription {
    /// Whether the subscriber said it can reply to confirmations.
    pub fn replies_to_confirmations(&self) -> bool {
        self.honored["supports_confirmation_reply"] == true
    }
    /// Whether the subscriber said it can reply to clarifications.
    pub fn replies_to_clarifications(&self) -> bool {
        self.honored["supports_clarification_reply"] == true
    }
    /// Whether a non-critical event of type `ty` passes the subscription's `event_filters`
    /// (AAEP §5.3.1.7): not matched by an `exclude` pattern, and matched by an `include` one
    /// when `include` is given. A pattern is the literal type, or ends in `*` and matches every
    /// type it is a prefix of (`aaep:agent.*` matches `aaep:agent.tool.invoked`).
    ///
    /// Found by review: patterns were compared as literal types, so the spec's default
    /// `include: ["aaep:agent.*"]` let no non-critical event through, and `exclude:
    /// ["aaep:agent.progress.*"]` let progress events through, which §5.3.1.7 forbids.
    pub fn wants(&self, ty: &str, critical: bool) -> bool {
        if critical {
            return true;
        }
        let f = &self.honored["event_filters"];
        let matches = |p: &str| match p.strip_suffix('*') {
            Some(prefix) => ty.starts_with(prefix),
            None => p == ty,
        };
        let listed = |k: &str| {
            f[k].as_array()
                .is_some_and(|l| l.iter().filter_map(Value::as_str).any(matches))
        };
        let included = f["include"].as_array().is_none_or(|_| listed("include"));
        included && !listed("exclude")
    }
}

/// One stored event as delivered: its `seq` and the JSON with `sequence_number`.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// `sequence_number`.
    pub seq: i64,
    /// `event_id`.
    pub event_id: String,
    /// `type`.
    pub ty: String,
    /// Critical (never filtered).
    pub critical: bool,
    /// The event.
    pub data: Value,
}

/// A clarification question an agent asked (AAEP §4.4.2, §6.5): `assent-core`'s record, with
/// its `reply_token` set.
pub use assent_core::clarification::Clarification;

#[cfg(test)]
mod tests {
    use super::Subscription;
    use serde_json::json;

    fn with(filters: serde_json::Value) -> Subscription {
        Subscription {
            id: "sub_1".into(),
            principal: "alice".into(),
            subscriber_id: "t".into(),
            honored: json!({"event_filters": filters}),
            start_seq: 0,
            closed_at: None,
        }
    }

    /// AAEP §5.3.1.7's examples: `*` at the end matches by prefix, across dots; exclude wins.
    #[test]
    fn filter_patterns_ending_in_a_star_match_by_prefix_in_include_and_exclude() {
        let progress = "aaep:agent.progress.updated";
        let s = with(json!({"include": ["aaep:agent.*"], "exclude": ["aaep:agent.progress.*"]}));
        assert!(s.wants("aaep:agent.state.changed", false));
        assert!(s.wants("aaep:agent.tool.invoked", false));
        assert!(!s.wants(progress, false));
        assert!(s.wants(progress, true), "critical events pass every filter");
        let s = with(json!({"include": ["aaep:agent.tool.*", "aaep:agent.session.started"]}));
        assert!(s.wants("aaep:agent.tool.completed", false));
        assert!(s.wants("aaep:agent.session.started", false));
        assert!(!s.wants("aaep:agent.session.completed", false));
        assert!(!s.wants("aaep:agent.toolbox", false));
        assert!(!s.wants("x:aaep:agent.tool.invoked", false));
        assert!(with(json!({})).wants(progress, false));
    }
}
