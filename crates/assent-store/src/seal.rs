//! Row seals: rows whose content lets something happen — a dashboard session signs someone in,
//! a token lets a call run, a grant approves calls — carry an HMAC-SHA256 over their columns
//! under a key derived from the audit key, which every replica reads from `keys_dir` and the
//! database never holds. A row without its seal (planted, or edited, by whoever can write the
//! database but not read the keys) is treated as absent: fail closed.
//!
//! What a seal cannot stop: a row put back as it was earlier, seal and all (a used token made
//! unused again, a revoked grant revoked no more); such edits are found by `assent audit
//! verify` against the chain (`integrity_tokens.rs`), not prevented here.

use ed25519_dalek::SigningKey;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

/// What sealed rows are for; each has a key of its own (the label it is derived under).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sealed {
    /// `ui_sessions` (migration 0027).
    UiSession,
    /// `tokens` (migration 0028).
    Token,
    /// `grants` (migration 0028).
    Grant,
    /// `approvals`: the terms a call was held under (migration 0029, [`crate::approval_seal`]).
    Approval,
    /// `votes`: one operator's vote towards a quorum (migration 0032, [`crate::votes`]).
    Vote,
    /// `approvals` and `decisions`: how an approval was settled (migration 0035,
    /// [`crate::settlement_seal`]).
    Settlement,
    /// `plans`: an MPLP plan's row (migration 0058, [`crate::plans`]).
    Plan,
    /// `passkey_enrolments`: a one-time enrolment code (migration 0063,
    /// [`crate::passkeys::issue_enrolment`]).
    Enrolment,
    /// `passkey_ceremonies`: a WebAuthn ceremony in progress (migration 0064,
    /// [`crate::passkeys`]).
    Ceremony,
    /// `passkeys`: a registered passkey (migration 0070, [`crate::passkeys`]).
    Passkey,
}

impl Sealed {
    fn label(self) -> &'static [u8] {
        match self {
            Sealed::UiSession => b"assent/seal/v1/ui_sessions",
            Sealed::Token => b"assent/seal/v1/tokens",
            Sealed::Grant => b"assent/seal/v1/grants",
            Sealed::Approval => b"assent/seal/v1/approvals",
            Sealed::Vote => b"assent/seal/v1/votes",
            Sealed::Settlement => b"assent/seal/v1/settlements",
            Sealed::Plan => b"assent/seal/v1/plans",
            Sealed::Enrolment => b"assent/seal/v1/passkey_enrolments",
            Sealed::Ceremony => b"assent/seal/v1/passkey_ceremonies",
            Sealed::Passkey => b"assent/seal/v1/passkeys",
        }
    }
}

/// The seal key of one kind of row: HMAC-SHA256 of its label keyed with the audit key's 32
/// secret bytes, never the signing key itself.
#[derive(Clone)]
pub(crate) struct SealKey([u8; 32]);

/// The seal key of every kind of row, derived once when the store opens (its audit key never
/// changes while it is open): a cycle asked for about fourteen, each an HMAC of its own. One
/// field a kind, so that a new kind cannot be added without its key.
pub(crate) struct SealKeys {
    ui_session: SealKey,
    token: SealKey,
    grant: SealKey,
    approval: SealKey,
    vote: SealKey,
    settlement: SealKey,
    plan: SealKey,
    enrolment: SealKey,
    ceremony: SealKey,
    passkey: SealKey,
}

impl SealKeys {
    /// The keys of every kind of row, derived from `audit_key`.
    pub(crate) fn of(audit_key: &SigningKey) -> SealKeys {
        let of = |what| SealKey::of(audit_key, what);
        SealKeys {
            ui_session: of(Sealed::UiSession),
            token: of(Sealed::Token),
            grant: of(Sealed::Grant),
            approval: of(Sealed::Approval),
            vote: of(Sealed::Vote),
            settlement: of(Sealed::Settlement),
            plan: of(Sealed::Plan),
            enrolment: of(Sealed::Enrolment),
            ceremony: of(Sealed::Ceremony),
            passkey: of(Sealed::Passkey),
        }
    }

    /// The key of `what` rows.
    pub(crate) fn get(&self, what: Sealed) -> SealKey {
        match what {
            Sealed::UiSession => &self.ui_session,
            Sealed::Token => &self.token,
            Sealed::Grant => &self.grant,
            Sealed::Approval => &self.approval,
            Sealed::Vote => &self.vote,
            Sealed::Settlement => &self.settlement,
            Sealed::Plan => &self.plan,
            Sealed::Enrolment => &self.enrolment,
            Sealed::Ceremony => &self.ceremony,
            Sealed::Passkey => &self.passkey,
        }
        .clone()
    }
}

impl SealKey {
    /// The key of `what` rows, derived from `audit_key`.
    pub(crate) fn of(audit_key: &SigningKey, what: Sealed) -> SealKey {
        let mut d = mac(&audit_key.to_bytes());
        d.update(what.label());
        SealKey(d.finalize().into_bytes().into())
    }

    /// The seal (64 hex) of a row whose columns are `columns`: a JSON array of strings,
    /// integers, booleans and nulls, so that one text stands for one row.
    pub(crate) fn seal(&self, columns: &Value) -> String {
        let mut m = mac(&self.0);
        m.update(columns.to_string().as_bytes());
        hex::encode(m.finalize().into_bytes())
    }

    /// Whether `seal` is the seal of `columns` (compared in constant time; `false` for an
    /// empty or malformed seal).
    pub(crate) fn holds(&self, columns: &Value, seal: &str) -> bool {
        let Ok(given) = hex::decode(seal) else {
            return false;
        };
        let mut m = mac(&self.0);
        m.update(columns.to_string().as_bytes());
        m.verify_slice(&given).is_ok()
    }
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_keys_derived_at_open_are_each_kinds_own() {
        let k = SigningKey::from_bytes(&[9; 32]);
        let keys = SealKeys::of(&k);
        let all = [
            Sealed::UiSession,
            Sealed::Token,
            Sealed::Grant,
            Sealed::Approval,
            Sealed::Vote,
            Sealed::Settlement,
            Sealed::Plan,
            Sealed::Enrolment,
            Sealed::Ceremony,
            Sealed::Passkey,
        ];
        for what in all {
            assert_eq!(keys.get(what).0, SealKey::of(&k, what).0, "{what:?}");
        }
    }

    #[test]
    fn a_seal_holds_for_its_row_only_and_each_kind_has_its_own_key() {
        let k = SigningKey::from_bytes(&[7; 32]);
        let tokens = SealKey::of(&k, Sealed::Token);
        let row = json!(["t1", "a1", "bot", "abc", 1, 2, "once", null]);
        let s = tokens.seal(&row);
        assert_eq!(s.len(), 64);
        assert!(tokens.holds(&row, &s));
        assert!(!tokens.holds(&json!(["t1", "a1", "bot", "abd", 1, 2, "once", null]), &s));
        assert!(!tokens.holds(&row, ""));
        assert!(!tokens.holds(&row, "zz"));
        assert!(!SealKey::of(&k, Sealed::Grant).holds(&row, &s));
        let other = SigningKey::from_bytes(&[8; 32]);
        assert!(!SealKey::of(&other, Sealed::Token).holds(&row, &s));
    }
}
