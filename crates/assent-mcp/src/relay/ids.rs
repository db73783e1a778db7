//! Which JSON-RPC ids each end may answer under. An upstream answer is accepted only for an
//! id the relay itself wrote to the upstream and that has not been answered yet ([`OpenIds`],
//! filled by the upstream writer, the one place every request to the upstream passes): an
//! answer twice under one id, under an id the upstream never got (a call still held at the
//! gateway) or under another spelling of one (`3.0` for `3`) is dropped. The upstream's own
//! requests reach the client under an id of the relay's ([`UPSTREAM_ID_PREFIX`]), never
//! under the upstream's, and the relay's own questions carry ids nobody can guess
//! ([`own_elicitation_id`]), so an upstream cannot have the client answer the relay.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Mutex;

/// At most this many requests wait for the upstream's answer (the relay's own `tools/list`
/// holds at most 100,000 tools, the same bound); a request beyond it is not sent.
pub(super) const MAX_OPEN: usize = 100_000;

/// At most this many of the upstream's own requests wait for the client's answer; one beyond
/// it is dropped (not answered: an upstream that reads nothing would grow the replies).
pub(super) const MAX_FROM_UPSTREAM: usize = 10_000;

/// The prefix of the id under which the client sees one of the upstream's requests
/// (`assent-upstream-N`).
pub(super) const UPSTREAM_ID_PREFIX: &str = "assent-upstream-";

/// A fresh id for one of the relay's own elicitation requests: `assent-elicit-` and 128
/// random bits (32 hex digits), so an upstream cannot name it in advance.
pub(super) fn own_elicitation_id() -> String {
    format!("assent-elicit-{}", uuid::Uuid::new_v4().simple())
}

/// The ids (JSON text, as `serde_json` writes them) of the requests written to the upstream
/// and not answered yet, and of the client's requests queued for the writer (in use, but not
/// yet answerable: found by review, a client request queued behind a full upstream pipe was
/// in no table, so its id could be reused by a call, whose result was then taken from the
/// first request's answer).
#[derive(Default)]
pub(super) struct OpenIds(Mutex<Ids>);

#[derive(Default)]
struct Ids {
    open: HashSet<String>,
    queued: HashSet<String>,
}

/// What the writer needs of a line: whether it is a request, and its id.
#[derive(Deserialize)]
struct Head {
    method: Option<IgnoredAny>,
    id: Option<Value>,
}

impl OpenIds {
    /// A line on its way to the upstream (the relay's own serialisation): a request's id is
    /// noted as open first. `None` (the line is not sent, with a warning) when
    /// [`MAX_OPEN`] requests are open already.
    pub(super) fn note(&self, line: String) -> Option<String> {
        let Ok(Head {
            method: Some(_),
            id: Some(id),
        }) = serde_json::from_str::<Head>(&line)
        else {
            return Some(line);
        };
        let key = id.to_string();
        let mut ids = self.0.lock().expect("open ids");
        ids.queued.remove(&key);
        if ids.open.len() >= MAX_OPEN {
            tracing::warn!(
                open = ids.open.len(),
                "too many requests open at the upstream: one more was not sent"
            );
            return None;
        }
        ids.open.insert(key);
        Some(line)
    }

    /// A client request with id `key` (JSON text) is on its way to the writer: in use until
    /// [`OpenIds::note`] takes it (then open until answered).
    pub(super) fn queue(&self, key: String) {
        self.0.lock().expect("open ids").queued.insert(key);
    }

    /// Whether id `key` (JSON text) is in use: queued for the upstream or open there.
    pub(super) fn is_open(&self, key: &str) -> bool {
        let ids = self.0.lock().expect("open ids");
        ids.open.contains(key) || ids.queued.contains(key)
    }

    /// How many requests are queued for the upstream or open there.
    pub(super) fn in_use(&self) -> usize {
        let ids = self.0.lock().expect("open ids");
        ids.open.len() + ids.queued.len()
    }

    /// Takes open id `key` (JSON text): whether the upstream may answer under it, once.
    pub(super) fn take(&self, key: &str) -> bool {
        self.0.lock().expect("open ids").open.remove(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_open_once_and_only_in_its_own_spelling() {
        let open = OpenIds::default();
        let req = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
        assert_eq!(open.note(req.into()).as_deref(), Some(req));
        assert!(
            open.note(r#"{"jsonrpc":"2.0","method":"x"}"#.into())
                .is_some()
        );
        assert!(
            open.note(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#.into())
                .is_some()
        );
        assert!(!open.take("3.0"));
        assert!(!open.take("4"));
        assert!(open.take("3"));
        assert!(!open.take("3"));
    }

    #[test]
    fn own_elicitation_ids_differ() {
        let (a, b) = (own_elicitation_id(), own_elicitation_id());
        assert!(a.starts_with("assent-elicit-") && a.len() == 14 + 32 && a != b);
    }
}
