//! Dashboard sign-ins through an OpenID Connect provider (issue 14 §7).
//!
//! A sign-in in progress is held by the browser that started it, not by the database: its
//! `state`, nonce, PKCE verifier, where to go afterwards, whether it is a step-up and when it
//! started and expires ([`SignIn`]) are sealed into a cookie ([`Store::seal_sign_in`],
//! [`Store::open_sign_in`]) with AES-256-GCM (ring) under a key derived from the audit key,
//! which every replica reads from `keys_dir` and the database never holds. Starting a sign-in
//! therefore writes nothing and holds no place in a shared pool, so no one's starts can crowd
//! out another's. Found by review: sign-ins in progress were rows, capped per client network,
//! and anyone behind an office's NAT kept its people's single sign-on refused with one start
//! every 30 s.
//!
//! What the database keeps is which sign-ins were spent: the SHA-256 of each `state` whose code
//! a callback was about to exchange with the provider ([`Store::spend_oidc_state`], written
//! before the exchange, whatever its outcome), until [`SPENT_KEPT_MS`] after its cookie
//! expired, so that one sign-in cookie is good for one code exchange on every replica. Found by
//! review: spent only after a successful sign-in, one cookie replayed with `code=junk1`,
//! `junk2`… had the gateway post to the provider's token endpoint, with its client secret, as
//! often as the attacker liked. A row therefore needs a sealed cookie of this gateway's (free
//! to obtain) and a callback the gateway's throttle let through to the exchange (failed
//! exchanges are limited per client address, exchanges in flight per replica: the server's
//! `throttle`): rows are bounded by that rate times their life (at most 15 minutes), and each
//! spend removes the rows that ran out. Written unannounced: bookkeeping that wakes no event
//! stream.

use crate::error::StoreError;
use crate::params;
use crate::single_use;
use crate::store::Store;
use hmac::{Hmac, KeyInit, Mac};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// One sign-in in progress, as its browser holds it (sealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignIn {
    /// The OAuth `state` sent to the provider, which its callback must carry back.
    pub state: String,
    /// The nonce the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier (RFC 7636) sent with the code.
    pub pkce_verifier: String,
    /// The dashboard path to go to afterwards.
    pub next: String,
    /// A step-up: the provider was sent `max_age=0`, and must have authenticated the person
    /// since [`SignIn::started_at`].
    pub step_up: bool,
    /// Unix ms the sign-in was started.
    pub started_at: i64,
    /// Unix ms; the sign-in cannot be finished from then on.
    pub expires_at: i64,
    /// The dashboard session the browser was signed in with when it started (its cookie is
    /// `SameSite=Strict`, so it comes with the same-site start but not with the provider's
    /// cross-site redirect back): ended when this sign-in finishes, as a key sign-in ends the
    /// session it replaces. `None` when it had none; absent in sign-ins sealed before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// Longest `state`, `nonce` or `pkce_verifier` sealed, in bytes.
const MAX_TOKEN: usize = 256;
/// Longest `next` sealed, in bytes. Found by review: at 2048 (the dashboard's own `next`
/// limit), a page sending a browser to start four sign-ins with a `next` of `"`s (each doubled
/// in JSON) had it send some 16 KB of cookies with every request for 10 minutes (proxies refuse
/// such requests: `400`), or hold a cookie too large to keep.
pub const MAX_NEXT: usize = 512;
/// Longest sealed sign-in opened, in bytes: what one cookie can hold.
const MAX_SEALED: usize = 4096;

/// What the key of sealed sign-ins is derived under (HMAC-SHA256 keyed with the audit key's
/// secret bytes, as [`crate::seal`] derives its keys, under a label of its own).
const KEY_LABEL: &[u8] = b"assent/oidc/v1/sign-in-cookie";
/// The first byte of a sealed sign-in: its format.
const FORMAT: u8 = 1;
/// Random bytes per sealed sign-in that its own AES key is derived from.
const SALT_LEN: usize = 16;
/// The format byte, the salt and the AES-GCM nonce, in front of the ciphertext.
const HEAD_LEN: usize = 1 + SALT_LEN + NONCE_LEN;

/// How long a spent `state` is kept after its sign-in's expiry (Unix ms): 5 minutes, for
/// replicas whose clocks differ.
pub const SPENT_KEPT_MS: i64 = 300_000;

impl Store {
    /// `s` sealed for its browser: the format byte, 16 random bytes, a random 96-bit nonce,
    /// then `s` (JSON) under AES-256-GCM with the header as associated data. Each sealed sign-in
    /// has a key of its own, HMAC-SHA256 of its random bytes under the store's sign-in key
    /// (derived from the audit key), so that the number of sign-ins ever sealed puts no
    /// random-nonce bound on the shared key. `Invalid` for a `state`, nonce or verifier longer
    /// than 256 bytes or a `next` longer than [`MAX_NEXT`].
    pub fn seal_sign_in(&self, s: &SignIn) -> Result<Vec<u8>, StoreError> {
        if [&s.state, &s.nonce, &s.pkce_verifier]
            .iter()
            .any(|f| f.len() > MAX_TOKEN)
            || s.replaces.as_ref().is_some_and(|r| r.len() > MAX_TOKEN)
            || s.next.len() > MAX_NEXT
        {
            return Err(StoreError::Invalid(
                "an SSO sign-in's state, nonce and verifier are at most 256 bytes, its next path 512".into(),
            ));
        }
        let mut head = [0u8; HEAD_LEN];
        head[0] = FORMAT;
        getrandom::fill(&mut head[1..])
            .map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
        let (key, nonce) = self.sign_in_key(&head);
        let mut out = serde_json::to_vec(s)
            .map_err(|e| StoreError::Invalid(format!("the sign-in could not be written: {e}")))?;
        key.seal_in_place_append_tag(nonce, Aad::from(&head[..]), &mut out)
            .map_err(|_| StoreError::Invalid("the sign-in could not be sealed".into()))?;
        out.splice(0..0, head);
        Ok(out)
    }

    /// The sign-in `sealed` holds, when this store's key sealed it (any replica sharing
    /// `keys_dir`), it is whole, and it has not expired by `now` (Unix ms); `None` otherwise:
    /// forged, altered, sealed under other keys, or expired.
    pub fn open_sign_in(&self, sealed: &[u8], now: i64) -> Option<SignIn> {
        let tag = AES_256_GCM.tag_len();
        if sealed.len() < HEAD_LEN + tag || sealed.len() > MAX_SEALED || sealed[0] != FORMAT {
            return None;
        }
        let (head, body) = sealed.split_at(HEAD_LEN);
        let (key, nonce) = self.sign_in_key(head);
        let mut body = body.to_vec();
        let plain = key.open_in_place(nonce, Aad::from(head), &mut body).ok()?;
        let s: SignIn = serde_json::from_slice(plain).ok()?;
        (s.expires_at > now).then_some(s)
    }

    /// The AES-256-GCM key and nonce of the sealed sign-in with header `head` (format, salt,
    /// nonce).
    fn sign_in_key(&self, head: &[u8]) -> (LessSafeKey, Nonce) {
        let mut m = mac(&self.audit_key.to_bytes());
        m.update(KEY_LABEL);
        let mut m = mac(&m.finalize().into_bytes());
        m.update(&head[1..1 + SALT_LEN]);
        let key = UnboundKey::new(&AES_256_GCM, &m.finalize().into_bytes())
            .expect("AES-256 takes a 32-byte key");
        let mut n = [0u8; NONCE_LEN];
        n.copy_from_slice(&head[1 + SALT_LEN..HEAD_LEN]);
        (LessSafeKey::new(key), Nonce::assume_unique_for_key(n))
    }

    /// Whether the sign-in whose `state` has SHA-256 `state_sha256` (64 hex) was spent already
    /// ([`Store::spend_oidc_state`]); a read, without the write transaction (the callback
    /// needs no credentials).
    pub fn oidc_state_spent(&self, state_sha256: &str) -> Result<bool, StoreError> {
        check_digest(state_sha256)?;
        let n: i64 = self
            .lock()
            .conn()
            .prepare_cached("SELECT COUNT(*) FROM oidc_spent_states WHERE state_sha256 = ?1")?
            .query_row([state_sha256], |r| r.get(0))?;
        Ok(n > 0)
    }

    /// Records that the sign-in whose `state` has SHA-256 `state_sha256` (64 hex) is spent
    /// (its callback is about to exchange the code: call it before asking the provider), kept
    /// until [`SPENT_KEPT_MS`] after `expires_at` (Unix ms, its expiry), after removing the
    /// records that ran out before `now`: `true`; `false` (nothing written) when it was
    /// recorded already, or its record would have run out by `now` (the database's clock on
    /// PostgreSQL), by this replica or another (a replayed callback, or one racing its
    /// first: of two at once exactly one gets `true`, on SQLite and PostgreSQL). `Invalid` for
    /// a digest that is not 64 lowercase hex digits.
    pub fn spend_oidc_state(
        &self,
        state_sha256: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        check_digest(state_sha256)?;
        let kept_until = expires_at.saturating_add(SPENT_KEPT_MS);
        self.write_unannounced(|tx| {
            // By the database's clock on PostgreSQL (found by review: a replica whose clock ran
            // more than SPENT_KEPT_MS fast deleted spent states whose cookies other replicas
            // still accepted, allowing one more code exchange per replayed callback).
            let now = tx.shared_clock_ms(now)?;
            // A sign-in whose record would already be gone is spent (found by review: on a
            // replica whose clock ran over SPENT_KEPT_MS slow the cookie still opened, and each
            // replay inserted a record the next spend removed, so each reached the exchange).
            if kept_until <= now {
                return Ok(false);
            }
            tx.execute(
                "DELETE FROM oidc_spent_states WHERE kept_until <= ?1",
                [now],
            )?;
            let n = tx.execute(
                "INSERT INTO oidc_spent_states (state_sha256, kept_until) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                params![state_sha256, kept_until],
            )?;
            Ok(n == 1)
        })
    }
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length")
}

/// `Invalid` unless `d` is 64 lowercase hex digits.
fn check_digest(d: &str) -> Result<(), StoreError> {
    single_use::check_digest(
        d,
        "an SSO sign-in's state is stored by its SHA-256 (64 hex digits)",
    )
}
