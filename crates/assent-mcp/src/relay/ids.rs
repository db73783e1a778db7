//! Which JSON-RPC ids each end may answer under. An upstream answer is accepted only for an
//! id the relay itself wrote to the upstream and that has not been answered yet ([`OpenIds`],
//! filled by the upstream writer, the one place every request to the upstream passes): an
//! answer twice under one id, under an id the upstream never got (a call still held at the
//! gateway) or under another spelling of one (`3.0` for `3`) is dropped. The upstream's own
//! requests reach the client under an id of the relay's ([`UPSTREAM_ID_PREFIX`]), never
//! under the upstream's, and the relay's own questions carry ids nobody can guess
//! ([`own_elicitation_id`]), so an upstream cannot have the client answer the relay.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
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

/// At most this many bytes of requests given up ([`OpenIds`]: cancelled at the upstream)
/// are kept reserved apart from those in flight; past it a cancelled request stays counted
/// in flight (fail closed: its id is never freed before its answer).
pub(super) const MAX_GONE_BYTES: usize = 64 * 1024 * 1024;

/// The ids (JSON text, as `serde_json` writes them) of the requests written to the upstream
/// and not answered yet, and of the client's requests queued for the writer (in use, but not
/// yet answerable: found by review, a client request queued behind a full upstream pipe was
/// in no table, so its id could be reused by a call, whose result was then taken from the
/// first request's answer). A request the upstream was told is cancelled
/// (`notifications/cancelled`, which the writer sees after the request itself) is given up:
/// its id stays reserved (a late answer is still taken once, never for another request
/// under the same id) but no longer counts as in flight ([`OpenIds::in_use`]). Found by
/// review: a receiver should not answer a cancelled request, so each cancelled request (and
/// each page of the pin check's `tools/list` given up at its deadline) held one of the
/// client's places in flight for good, and after 256 every request was refused. Given-up ids
/// are bounded: at most [`MAX_OPEN`] of them and [`MAX_GONE_BYTES`] of their requests.
#[derive(Default)]
pub(super) struct OpenIds(Mutex<Ids>);

#[derive(Default)]
struct Ids {
    /// Open at the upstream: id → the bytes of its request.
    open: HashMap<String, usize>,
    queued: HashSet<String>,
    /// Given up (cancelled at the upstream), still reserved: id → the bytes of its request.
    gone: HashMap<String, usize>,
    /// The bytes of the requests in `gone`.
    gone_bytes: usize,
}

/// What the writer needs of a line: whether it is a request, and its id.
#[derive(Deserialize)]
struct Head {
    method: Option<Value>,
    id: Option<Value>,
}

/// The request a `notifications/cancelled` names.
#[derive(Deserialize)]
struct Cancel {
    params: CancelParams,
}

#[derive(Deserialize)]
struct CancelParams {
    #[serde(rename = "requestId")]
    request_id: Value,
}

impl OpenIds {
    /// [`OpenIds::note_giving_up`]'s line alone.
    #[cfg(test)]
    pub(super) fn note(&self, line: String) -> Option<String> {
        self.note_giving_up(line).0
    }

    /// A line on its way to the upstream (the relay's own serialisation): a request's id is
    /// noted as open first; a cancellation gives up the request it names, when open
    /// ([`OpenIds::give_up`]). The line, `None` (it is not sent, with a warning) when
    /// [`MAX_OPEN`] requests are open already; and the id (JSON text) of the request the line
    /// gave up, when it did.
    pub(super) fn note_giving_up(&self, line: String) -> (Option<String>, Option<String>) {
        let Ok(head) = serde_json::from_str::<Head>(&line) else {
            return (Some(line), None);
        };
        let id = match head {
            Head {
                method: Some(_),
                id: Some(id),
            } => id,
            Head {
                method: Some(m),
                id: None,
            } if m == "notifications/cancelled" => {
                let gone = serde_json::from_str::<Cancel>(&line)
                    .ok()
                    .map(|c| c.params.request_id.to_string())
                    .filter(|key| self.give_up(key));
                return (Some(line), gone);
            }
            _ => return (Some(line), None),
        };
        let key = id.to_string();
        let mut ids = self.0.lock().expect("open ids");
        ids.queued.remove(&key);
        if ids.open.len() >= MAX_OPEN {
            tracing::warn!(
                open = ids.open.len(),
                "too many requests open at the upstream: one more was not sent"
            );
            return (None, None);
        }
        ids.open.insert(key, line.len());
        (Some(line), None)
    }

    /// Gives up open id `key` (JSON text): still reserved (answered once, late), no longer
    /// in flight; `true` when it did. Past [`MAX_OPEN`] given up or [`MAX_GONE_BYTES`] of
    /// their requests it stays open, counted in flight, with a warning.
    fn give_up(&self, key: &str) -> bool {
        let mut ids = self.0.lock().expect("open ids");
        let Some(&bytes) = ids.open.get(key) else {
            return false;
        };
        if ids.gone.len() >= MAX_OPEN || ids.gone_bytes + bytes > MAX_GONE_BYTES {
            tracing::warn!(
                given_up = ids.gone.len(),
                "too many cancelled requests unanswered upstream: one more stays in flight"
            );
            return false;
        }
        ids.open.remove(key);
        ids.gone.insert(key.to_string(), bytes);
        ids.gone_bytes += bytes;
        true
    }

    /// A client request with id `key` (JSON text) is on its way to the writer: in use until
    /// [`OpenIds::note`] takes it (then open until answered).
    pub(super) fn queue(&self, key: String) {
        self.0.lock().expect("open ids").queued.insert(key);
    }

    /// Whether id `key` (JSON text) is in use: queued for the upstream, open there, or given
    /// up there and not answered yet.
    pub(super) fn is_open(&self, key: &str) -> bool {
        let ids = self.0.lock().expect("open ids");
        ids.open.contains_key(key) || ids.queued.contains(key) || ids.gone.contains_key(key)
    }

    /// How many requests are queued for the upstream or open there (not those given up).
    pub(super) fn in_use(&self) -> usize {
        let ids = self.0.lock().expect("open ids");
        ids.open.len() + ids.queued.len()
    }

    /// Takes open (or given-up) id `key` (JSON text): whether the upstream may answer under
    /// it, once.
    pub(super) fn take(&self, key: &str) -> bool {
        let mut ids = self.0.lock().expect("open ids");
        if ids.open.remove(key).is_some() {
            return true;
        }
        match ids.gone.remove(key) {
            Some(bytes) => {
                ids.gone_bytes -= bytes;
                true
            }
            None => false,
        }
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

    /// Review finding: a cancelled request the upstream (rightly) never answers stayed in
    /// flight for good. Its cancellation gives it up: no longer in use, its id still
    /// reserved and its late answer taken once; a cancellation of no open request does
    /// nothing.
    #[test]
    fn a_cancelled_request_is_given_up_not_in_flight_but_still_reserved() {
        let open = OpenIds::default();
        let req = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
        assert!(open.note(req.into()).is_some());
        assert_eq!(open.in_use(), 1);
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
        assert_eq!(open.note(cancel.into()).as_deref(), Some(cancel));
        assert_eq!(open.in_use(), 0);
        assert!(open.is_open("7"));
        let other =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}"#;
        assert!(open.note(other.into()).is_some());
        assert!(!open.is_open("8"));
        assert!(open.take("7"));
        assert!(!open.take("7"));
        assert!(!open.is_open("7"));
    }

    #[test]
    fn own_elicitation_ids_differ() {
        let (a, b) = (own_elicitation_id(), own_elicitation_id());
        assert!(a.starts_with("assent-elicit-") && a.len() == 14 + 32 && a != b);
    }

    /// A cancellation names the request it gave up, and only when it did: not one given up
    /// already, nor one past the bound on given-up requests (which stays in flight).
    #[test]
    fn a_cancellation_names_the_request_it_gave_up_only_when_it_did() {
        let open = OpenIds::default();
        let cancel = |id: u32| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
            )
        };
        assert!(
            open.note(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#.into())
                .is_some()
        );
        assert_eq!(open.note_giving_up(cancel(7)).1.as_deref(), Some("7"));
        assert_eq!(open.note_giving_up(cancel(7)).1, None, "given up already");
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{{"p":"{}"}}}}"#,
            "x".repeat(MAX_GONE_BYTES)
        );
        assert!(open.note(big).is_some());
        assert_eq!(open.note_giving_up(cancel(8)).1, None, "past the bound");
        assert_eq!(open.in_use(), 1);
    }
}
