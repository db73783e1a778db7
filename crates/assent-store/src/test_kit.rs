//! What the store's in-crate unit tests share (compiled for tests only): a bare
//! [`crate::events::Envelopes`] and the registry of agent `bot` with its local tool `pay`,
//! which needs approval. The integration tests (`tests/it`) have their own kit.

use assent_core::policy::Registry;
use serde_json::{Value, json};

/// Renders a bare envelope: an id and a type (the events' shapes are not under test).
pub(crate) struct Bare;

impl crate::events::Envelopes for Bare {
    fn aaep(&self, _: &crate::events::AaepEvent<'_>) -> Value {
        json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "test"})
    }
    fn mplp(&self, _: &crate::events::MplpEvent<'_>) -> Value {
        json!({"event_id": uuid::Uuid::new_v4().to_string(), "event_type": "test"})
    }
}

/// The registry of agent `bot` whose local tool `pay` needs approval.
pub(crate) fn bot_pays() -> Registry {
    let agent =
        "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
    Registry::load(&[("a".into(), agent.into())], &[]).unwrap()
}
