//! Operators' passkeys and the WebAuthn ceremonies in progress (issue 14 §4). A passkey is
//! stored as `webauthn-rs` left it (opaque JSON, updated after each use for its signature
//! counter) with its public key as a JWK for receipts. A ceremony's state is kept in the
//! database, so a ceremony started on one replica finishes on any other; it is bound to a
//! principal (and, for a vote, to an approval, its `call_hash` and the decision) and taken
//! once. Registration and removal are audited (`passkey.registered`, `passkey.removed`).

use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _, Tx};
use crate::error::StoreError;
use crate::params;
use crate::seal::{SealKey, Sealed};
use crate::single_use;
use crate::sql::{self, from_row};
use crate::store::Store;
use assent_core::passkey::PublicJwk;
use serde_json::{Value, json};

/// One registered passkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPasskey {
    /// The credential id (base64url).
    pub credential_id: String,
    /// The principal it belongs to.
    pub principal: String,
    /// The `webauthn-rs` credential (JSON).
    pub passkey: String,
    /// Its public key.
    pub public_key: PublicJwk,
    /// A name for people (`passkey 2026-11-24`, the browser's, …), at most 100 characters.
    pub label: String,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// One `passkeys` row of a principal as stored ([`Store::passkeys_of`]): the public key still
/// JSON text, as its seal covers it.
struct PasskeyRow {
    credential_id: String,
    passkey: String,
    jwk: String,
    label: String,
    created_at: i64,
}

/// A WebAuthn ceremony in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ceremony {
    /// Random id the client echoes.
    pub id: String,
    /// Who started it; only they may finish it.
    pub principal: String,
    /// `register` or `vote`.
    pub purpose: String,
    /// For a vote: the approval, its `call_hash` and the decision the challenge binds, and
    /// the challenge's nonce (`assent_core::passkey::vote_challenge`).
    pub approval_id: Option<String>,
    /// See `approval_id`.
    pub call_hash: Option<String>,
    /// See `approval_id`.
    pub decision: Option<String>,
    /// See `approval_id`.
    pub nonce: Option<String>,
    /// The `webauthn-rs` ceremony state (JSON).
    pub state: String,
    /// Unix milliseconds; a ceremony is not taken after it.
    pub expires_at: i64,
    /// For a registration: the SHA-256 of the enrolment code it was started with, used up
    /// when it finishes ([`Store::add_enrolled_passkey`]); set by [`Store::start_registration`].
    /// `None` for a vote, and for a registration started before migration 0056.
    pub code_sha256: Option<String>,
}

/// Most passkey ceremonies one principal may have in progress at once.
pub const MAX_CEREMONIES: i64 = 16;

impl Store {
    /// Stores passkey `p` (audited `passkey.registered` with its id and label). `Invalid` when
    /// the credential id is registered already (to anyone).
    pub fn add_passkey(&self, p: &StoredPasskey) -> Result<(), StoreError> {
        let key = self.seal_key(Sealed::Passkey);
        self.write(|tx| insert_passkey(tx, &key, p))
    }

    /// Stores passkey `p` as [`Store::add_passkey`] does, using up `p.principal`'s enrolment
    /// code `code_sha256` (the one its registration ceremony was started with) in the same
    /// transaction: `Ok(false)`, nothing stored, when that code is no longer there (another
    /// ceremony started with it finished first) or expired by `now` — one code registers one
    /// passkey.
    pub fn add_enrolled_passkey(
        &self,
        p: &StoredPasskey,
        code_sha256: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (key, sealed) = (
            self.seal_key(Sealed::Enrolment),
            self.seal_key(Sealed::Passkey),
        );
        self.write(|tx| {
            if !take_code(**tx, &key, &p.principal, code_sha256, now)? {
                return Ok(false);
            }
            insert_passkey(tx, &sealed, p)?;
            Ok(true)
        })
    }

    /// The passkeys of `principal`, oldest first. A row whose public key does not parse, or
    /// whose seal does not hold (migration 0070: planted or edited in the database, or
    /// registered before), is left out: it cannot sign anything we would accept.
    pub fn passkeys_of(&self, principal: &str) -> Result<Vec<StoredPasskey>, StoreError> {
        Ok(self
            .rows_of(principal)?
            .into_iter()
            .filter(|(sealed, _)| *sealed)
            .filter_map(|(_, p)| {
                let public_key = serde_json::from_str::<PublicJwk>(&p.jwk).ok()?;
                Some(StoredPasskey {
                    credential_id: p.credential_id,
                    principal: principal.to_string(),
                    passkey: p.passkey,
                    public_key,
                    label: p.label,
                    created_at: p.created_at,
                })
            })
            .collect())
    }

    /// `principal`'s passkeys whose seal does not hold (registered before migration 0070, or
    /// planted or edited in the database), as `(credential_id, label, created_at)`, oldest
    /// first: they sign nothing, and are listed for removal (removing one withdraws the
    /// pending votes it signed and voids the tokens resting on it).
    pub fn unsealed_passkeys_of(
        &self,
        principal: &str,
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(self
            .rows_of(principal)?
            .into_iter()
            .filter(|(sealed, _)| !*sealed)
            .map(|(_, p)| (p.credential_id, p.label, p.created_at))
            .collect())
    }

    /// `principal`'s passkey rows as stored, oldest first, each with whether its seal holds
    /// ([`passkey_columns`]).
    fn rows_of(&self, principal: &str) -> Result<Vec<(bool, PasskeyRow)>, StoreError> {
        let key = self.seal_key(Sealed::Passkey);
        Ok(sql::rows(
            self.lock().conn(),
            "SELECT credential_id, passkey, public_key, label, created_at, seal FROM passkeys WHERE principal = ?1 ORDER BY created_at, credential_id",
            [principal],
            |r| {
                let row = PasskeyRow {
                    credential_id: r.get(0)?,
                    passkey: r.get(1)?,
                    jwk: r.get(2)?,
                    label: r.get(3)?,
                    created_at: r.get(4)?,
                };
                let seal: String = r.get(5)?;
                let columns =
                    passkey_columns(&row.credential_id, principal, &row.passkey, &row.jwk);
                Ok((key.holds(&columns, &seal), row))
            },
        )?)
    }

    /// Stores `passkey` (its `webauthn-rs` JSON after an assertion whose signature counter was
    /// `counter`) for `credential_id`, if the counter moved past the stored one: `true` when
    /// stored, `false` (nothing stored) when the stored counter is not below `counter` — an
    /// authenticator that counts (either counter above zero) must count up on every use. The
    /// check and the write are one transaction. Found by review: `webauthn-rs` compares with the
    /// counter read when the ceremony started, so a cloned authenticator's assertion in a
    /// ceremony opened before a genuine use passed with a counter already spent. A row whose
    /// seal does not hold is not advanced (`false`: a counter reset in the database lets no
    /// clone through); the new one is sealed.
    pub fn advance_passkey(
        &self,
        credential_id: &str,
        passkey: &str,
        counter: u32,
    ) -> Result<bool, StoreError> {
        let key = self.seal_key(Sealed::Passkey);
        self.write(|tx| {
            let Some((who, stored, jwk)) = sealed_row(**tx, &key, credential_id)? else {
                return Ok(false);
            };
            let was = serde_json::from_str::<serde_json::Value>(&stored)
                .ok()
                .and_then(|v| v["cred"]["counter"].as_u64())
                .unwrap_or(0);
            if (counter > 0 || was > 0) && u64::from(counter) <= was {
                return Ok(false);
            }
            let seal = key.seal(&passkey_columns(credential_id, &who, passkey, &jwk));
            tx.execute(
                "UPDATE passkeys SET passkey = ?2, seal = ?3 WHERE credential_id = ?1",
                params![credential_id, passkey, seal],
            )?;
            Ok(true)
        })
    }

    /// Removes `principal`'s passkey `credential_id` (audited `passkey.removed`) and, in the
    /// same transaction, withdraws the votes on pending approvals it signed (each audited
    /// `decision.vote_withdrawn`, as [`Store::withdraw_votes`]; found by review: a lost or
    /// cloned authenticator's vote still counted towards its quorum after its removal), and
    /// voids the unredeemed tokens of settled approvals that rest on it (each audited
    /// `token.voided`; found by review: a call it had approved kept its token:
    /// [`crate::voided::void_signed_with`]); the votes and decisions of settled approvals stay
    /// as they are. `false` when they have no such passkey.
    pub fn remove_passkey(
        &self,
        principal: &str,
        credential_id: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM passkeys WHERE credential_id = ?1 AND principal = ?2",
                params![credential_id, principal],
            )?;
            if n == 1 {
                let data = json!({"credential_id": credential_id});
                audit::append(**tx, now, "passkey.removed", None, principal, &data)?;
                let why = "the passkey that signed it was removed";
                crate::votes::withdraw_signed_with(tx, credential_id, principal, why, now)?;
                let why = "the passkey that approved it was removed";
                crate::voided::void_signed_with(**tx, credential_id, (principal, why), now)?;
            }
            Ok(n == 1)
        })
    }

    /// Stores ceremony `c`, removing the ceremonies that ended before `now`. `Invalid` when
    /// its principal has [`MAX_CEREMONIES`] in progress already (no one piles up state).
    pub fn put_ceremony(&self, c: &Ceremony, now: i64) -> Result<(), StoreError> {
        let key = self.seal_key(Sealed::Ceremony);
        self.write(|tx| {
            room_for(tx, c, now)?;
            insert_ceremony(**tx, &key, c)
        })
    }

    /// Starts registration ceremony `c` with `principal`'s one-time enrolment code (by its
    /// SHA-256, as [`Store::take_enrolment`]), in one transaction: `Invalid` past
    /// [`MAX_CEREMONIES`] (found by review: the code was taken first, so an operator at the cap
    /// lost it and needed a new one from an administrator); `Ok(false)` when no such unexpired
    /// code is theirs (nothing stored); `Ok(true)` when the ceremony was stored, keeping the
    /// code's digest. The code is not used here but when the registration finishes
    /// ([`Store::add_enrolled_passkey`]; found by review: a cancelled browser prompt burnt it).
    pub fn start_registration(
        &self,
        c: &Ceremony,
        code_sha256: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (key, ceremony_key) = (
            self.seal_key(Sealed::Enrolment),
            self.seal_key(Sealed::Ceremony),
        );
        self.write(|tx| {
            room_for(tx, c, now)?;
            if !has_code(**tx, &key, &c.principal, code_sha256, now)? {
                return Ok(false);
            }
            let c = Ceremony {
                code_sha256: Some(code_sha256.to_string()),
                ..c.clone()
            };
            insert_ceremony(**tx, &ceremony_key, &c)?;
            Ok(true)
        })
    }

    /// Takes ceremony `id` once: it is removed, and returned when `principal` started it for
    /// `purpose`, it has not ended by `now` and its seal holds (migration 0064); `None`
    /// otherwise (unknown, someone else's, another purpose, expired, taken already, or planted
    /// or edited in the database: found by review, a writer holding an operator's key planted a
    /// registration carrying a genuine enrolment code's digest and a challenge of their own).
    pub fn take_ceremony(
        &self,
        id: &str,
        principal: &str,
        purpose: &str,
        now: i64,
    ) -> Result<Option<Ceremony>, StoreError> {
        let key = self.seal_key(Sealed::Ceremony);
        self.write(|tx| {
            let c = single_use::take(
                tx,
                ("passkey_ceremonies", "id", &stored_id(id)),
                "id, principal, purpose, approval_id, call_hash, decision, nonce, state, expires_at, code_sha256, seal",
                |r| {
                    let c: db::Result<Ceremony> = from_row!(r => Ceremony {
                        id, principal, purpose, approval_id, call_hash, decision, nonce, state,
                        expires_at, code_sha256,
                    });
                    Ok((c?, r.get::<Option<String>>("seal")?))
                },
                // Someone else's: leave it to its owner.
                |(c, _)| c.principal == principal,
            )?;
            // A row whose seal does not hold (planted or edited in the database) is no
            // ceremony: taken away, not returned.
            Ok(c.filter(|(c, seal)| {
                let sealed = seal.as_ref().is_some_and(|s| key.holds(&ceremony_columns(c), s));
                sealed && c.purpose == purpose && c.expires_at > now
            })
            .map(|(c, _)| Ceremony {
                id: id.to_string(),
                ..c
            }))
        })
    }
}

/// The principal and public key a registered credential belongs to, read in the decision's
/// transaction (`None`: not registered, or its row's seal under `key` does not hold).
pub(crate) fn owner_of(
    tx: crate::db::Conn<'_>,
    key: &SealKey,
    credential_id: &str,
) -> crate::db::Result<Option<(String, Option<PublicJwk>)>> {
    let row = sealed_row(tx, key, credential_id)?;
    Ok(row.map(|(p, _, k)| (p, serde_json::from_str(&k).ok())))
}

/// Passkey `credential_id`'s `(principal, webauthn-rs JSON, public key JSON)` if its row's
/// seal under `key` holds ([`passkey_columns`]); `None` when there is no such row or its seal
/// does not hold (planted or edited in the database, or registered before migration 0070).
fn sealed_row(
    tx: Conn<'_>,
    key: &SealKey,
    credential_id: &str,
) -> db::Result<Option<(String, String, String)>> {
    let row: Option<(String, String, String, String)> = tx
        .query_row(
            "SELECT principal, passkey, public_key, seal FROM passkeys WHERE credential_id = ?1",
            [credential_id],
            db::tuple,
        )
        .optional()?;
    Ok(row
        .filter(|(who, pk, jwk, seal)| {
            key.holds(&passkey_columns(credential_id, who, pk, jwk), seal)
        })
        .map(|(who, pk, jwk, _)| (who, pk, jwk)))
}

/// What a passkey row's seal is over (migration 0070): `["assent/passkey/v1", credential_id,
/// principal, passkey, public_key]` — who it is, the key that verifies its assertions (in
/// both forms) and its signature counter (in `passkey`), as stored.
fn passkey_columns(credential_id: &str, principal: &str, passkey: &str, jwk: &str) -> Value {
    json!(["assent/passkey/v1", credential_id, principal, passkey, jwk])
}

/// Issues a one-time passkey enrolment code for `principal` (stored by `code_sha256`, 64 hex)
/// on the database behind `conn` — `assent passkeys enrol`, an administrator with access to
/// the database, never an API call: a stolen operator key cannot enrol its own passkey
/// (issue 14 §4). Audited `passkey.enrolment_issued` by `issued_by`. The row is sealed
/// ([`crate::seal::Sealed::Enrolment`]) under `audit_key`, the gateway's (`audit.key` in its
/// `keys_dir`): the gateway takes only a code whose seal holds (migration 0063; found by
/// review: a database writer holding an operator's key planted a code of their own and
/// registered an authenticator as that operator). `Invalid` when the schema is not current
/// (run `assent migrate`) or the digest is not 64 hex digits.
pub fn issue_enrolment(
    conn: crate::db::Conn<'_>,
    audit_key: &ed25519_dalek::SigningKey,
    principal: &str,
    code_sha256: &str,
    expires_at: i64,
    issued_by: &str,
    now: i64,
) -> Result<(), StoreError> {
    if let crate::migrate::SchemaState::Behind { at, latest } = crate::migrate::schema_state(conn)?
    {
        return Err(StoreError::Invalid(format!(
            "the database is at schema version {at}, this assent needs {latest}: run `assent migrate` first"
        )));
    }
    if code_sha256.len() != 64 || !code_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(StoreError::Invalid(
            "the code digest is not 64 hex digits".into(),
        ));
    }
    conn.write(|tx| -> Result<(), StoreError> {
        tx.execute("DELETE FROM passkey_enrolments WHERE expires_at <= ?1", [now])?;
        let key = SealKey::of(audit_key, Sealed::Enrolment);
        let seal = key.seal(&enrolment_columns(code_sha256, principal, issued_by, expires_at));
        tx.execute(
            "INSERT INTO passkey_enrolments (code_sha256, principal, issued_by, expires_at, seal) VALUES (?1,?2,?3,?4,?5)",
            params![code_sha256, principal, issued_by, expires_at, seal],
        )?;
        let data = json!({"principal": principal, "expires_at": expires_at});
        audit::append(**tx, now, "passkey.enrolment_issued", None, issued_by, &data)?;
        Ok(())
    })
}

impl Store {
    /// Takes `principal`'s enrolment code `code_sha256` once: `true` when it was issued for
    /// them and has not expired by `now` (it is then used up); `false` otherwise (a wrong or
    /// someone else's code is left alone).
    pub fn take_enrolment(
        &self,
        principal: &str,
        code_sha256: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let key = self.seal_key(Sealed::Enrolment);
        self.write(|tx| Ok(take_code(**tx, &key, principal, code_sha256, now)?))
    }
}

/// Uses `principal`'s unexpired enrolment code `code_sha256` whose seal holds under `key`:
/// whether there was one (one without a seal that holds is left alone, as absent).
fn take_code(
    tx: Conn<'_>,
    key: &SealKey,
    principal: &str,
    code_sha256: &str,
    now: i64,
) -> db::Result<bool> {
    if !has_code(tx, key, principal, code_sha256, now)? {
        return Ok(false);
    }
    let n = tx.execute(
        "DELETE FROM passkey_enrolments WHERE code_sha256 = ?1 AND principal = ?2 AND expires_at > ?3",
        params![code_sha256, principal, now],
    )?;
    Ok(n == 1)
}

/// Whether `principal` has the unexpired enrolment code `code_sha256` and its row's seal holds
/// under `key` ([`enrolment_columns`]). A row without one — planted by a database writer, or
/// issued before migration 0063 — is not a code: fail closed.
fn has_code(
    tx: Conn<'_>,
    key: &SealKey,
    principal: &str,
    code_sha256: &str,
    now: i64,
) -> db::Result<bool> {
    let row: Option<(String, i64, Option<String>)> = tx
        .query_row(
            "SELECT issued_by, expires_at, seal FROM passkey_enrolments WHERE code_sha256 = ?1 AND principal = ?2 AND expires_at > ?3",
            params![code_sha256, principal, now],
            db::tuple,
        )
        .optional()?;
    Ok(row.is_some_and(|(by, expires_at, seal)| {
        let cols = enrolment_columns(code_sha256, principal, &by, expires_at);
        seal.is_some_and(|seal| key.holds(&cols, &seal))
    }))
}

/// What an enrolment row's seal is over: `["assent/enrolment/v1", code_sha256, principal,
/// issued_by, expires_at]`.
fn enrolment_columns(
    code_sha256: &str,
    principal: &str,
    issued_by: &str,
    expires_at: i64,
) -> serde_json::Value {
    json!([
        "assent/enrolment/v1",
        code_sha256,
        principal,
        issued_by,
        expires_at
    ])
}

/// Removes the ceremonies that ended before `now`; `Invalid` when `c`'s principal has
/// [`MAX_CEREMONIES`] in progress still.
fn room_for(tx: &Tx<'_>, c: &Ceremony, now: i64) -> Result<(), StoreError> {
    let of = Some(("principal", c.principal.as_str()));
    let open = single_use::prune_and_count(tx, "passkey_ceremonies", "expires_at", now, of)?;
    if open >= MAX_CEREMONIES {
        return Err(StoreError::Invalid(format!(
            "{MAX_CEREMONIES} passkey ceremonies of yours are in progress already: finish one or wait 5 minutes"
        )));
    }
    Ok(())
}

/// Stores passkey `p`, sealed under `key` ([`passkey_columns`]), and its `passkey.registered`
/// record; `Invalid` when the credential id is registered already (to anyone). A row of that
/// id and principal whose seal does not hold (registered before migration 0070, or planted)
/// signs nothing and is replaced, recorded `passkey.removed` first.
fn insert_passkey(tx: &Tx<'_>, key: &SealKey, p: &StoredPasskey) -> Result<(), StoreError> {
    let taken: Option<String> = tx
        .query_row(
            "SELECT principal FROM passkeys WHERE credential_id = ?1",
            [&p.credential_id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(was) = taken {
        // Only its own principal's: another's would take over an id its votes name (found by
        // review).
        if was != p.principal || sealed_row(**tx, key, &p.credential_id)?.is_some() {
            return Err(StoreError::Invalid(
                "this passkey is registered already".into(),
            ));
        }
        tx.execute(
            "DELETE FROM passkeys WHERE credential_id = ?1",
            [&p.credential_id],
        )?;
        let data = json!({"credential_id": p.credential_id, "reason": "registered again: its row carried no seal that holds"});
        audit::append(**tx, p.created_at, "passkey.removed", None, &was, &data)?;
    }
    let jwk = serde_json::to_string(&p.public_key).expect("jwk");
    let seal = key.seal(&passkey_columns(
        &p.credential_id,
        &p.principal,
        &p.passkey,
        &jwk,
    ));
    tx.execute(
        "INSERT INTO passkeys (credential_id, principal, passkey, public_key, label, created_at, seal) VALUES (?1,?2,?3,?4,?5,?6,?7)",
        params![p.credential_id, p.principal, p.passkey, jwk, p.label, p.created_at, seal],
    )?;
    // The public key goes into the hash chain, so a receipt's passkey can be matched to a
    // registration no one can have rewritten since.
    let data =
        json!({"credential_id": p.credential_id, "label": p.label, "public_key": p.public_key});
    audit::append(
        **tx,
        p.created_at,
        "passkey.registered",
        None,
        &p.principal,
        &data,
    )?;
    Ok(())
}

/// Stores ceremony `c` under the SHA-256 of its id ([`stored_id`]), sealed under `key`
/// ([`ceremony_columns`]).
fn insert_ceremony(tx: Conn<'_>, key: &SealKey, c: &Ceremony) -> Result<(), StoreError> {
    let c = &Ceremony {
        id: stored_id(&c.id),
        ..c.clone()
    };
    let seal = key.seal(&ceremony_columns(c));
    tx.execute(
        "INSERT INTO passkey_ceremonies (id, principal, purpose, approval_id, call_hash, decision, nonce, state, expires_at, code_sha256, seal) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
        params![c.id, c.principal, c.purpose, c.approval_id, c.call_hash, c.decision, c.nonce, c.state, c.expires_at, c.code_sha256, seal],
    )?;
    Ok(())
}

/// A ceremony's id as its row keeps it: its SHA-256 (hex). The id itself goes to the browser
/// only, so whoever reads the database cannot finish a ceremony in progress (found by review:
/// a writer holding an operator's key read a genuine registration's id and challenge and
/// finished it with their own authenticator, using up the operator's enrolment code).
fn stored_id(id: &str) -> String {
    assent_core::canonical::sha256_hex(id.as_bytes())
}

/// What a ceremony row's seal is over (migration 0064): `["assent/ceremony/v1", id,
/// principal, purpose, approval_id, call_hash, decision, nonce, state, expires_at,
/// code_sha256]` — everything the ceremony decides.
fn ceremony_columns(c: &Ceremony) -> serde_json::Value {
    json!([
        "assent/ceremony/v1",
        c.id,
        c.principal,
        c.purpose,
        c.approval_id,
        c.call_hash,
        c.decision,
        c.nonce,
        c.state,
        c.expires_at,
        c.code_sha256
    ])
}
