//! The dashboard's signed-in sessions (kept in memory, by the SHA-256 of their id; 12 hours;
//! a restart signs everyone out) and the random tokens they are made of. A leaf: the server
//! state holds [`Sessions`]; sign-in and CSRF checks are [`super::session`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a dashboard session lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// One signed-in operator.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) operator: String,
    pub(crate) csrf: String,
    pub(crate) expires: Instant,
}

/// The dashboard's sessions, by the SHA-256 of the cookie's value.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<[u8; 32], Session>>,
}

/// 256 random bits as 64 hex digits (session ids, CSRF tokens).
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source");
    hex::encode(b)
}

/// SHA-256 of `s`: sessions are kept by the digest of their id.
fn digest(s: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).into()
}

impl Sessions {
    /// Starts a session for `operator`: its id (the cookie's value) and the session.
    pub(crate) fn start(&self, operator: &str) -> (String, Session) {
        let id = random_hex();
        let s = Session {
            operator: operator.to_string(),
            csrf: random_hex(),
            expires: Instant::now() + SESSION_TTL,
        };
        let mut map = self.by_id.lock().expect("sessions");
        map.retain(|_, s| s.expires > Instant::now());
        map.insert(digest(&id), s.clone());
        (id, s)
    }

    /// The live session with id `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let map = self.by_id.lock().expect("sessions");
        map.get(&digest(id))
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    /// Ends session `id`.
    pub(crate) fn end(&self, id: &str) {
        self.by_id.lock().expect("sessions").remove(&digest(id));
    }
}
