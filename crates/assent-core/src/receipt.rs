//! Approval receipts (issue 14 §5): a self-contained JSON account of one approval — the
//! canonical call and its `call_hash`, every vote and the decision that settled it, the
//! policies that held it — signed with the gateway's Ed25519 audit key, so that anyone with
//! that public key can check offline what was approved, by whom, under which policy.
//! `docs/schemas/approval-receipt.schema.json` describes the format. Building one from a
//! stored approval is the store's; signing and checking are here (pure: no key is read).

use crate::approval::{ApprovalStatus, DecisionKind, Settlement};
use crate::canonical::{CanonicalCall, ToolCall};
use crate::checkpoint::signature_verifies;
use crate::passkey::{PasskeyError, PasskeyProof};
use crate::quorum::Quorum;
use crate::risk::RiskTier;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

/// The receipt format this code writes and checks.
pub const RECEIPT_VERSION: u32 = 1;

/// One approval's receipt. Times are RFC 3339 (UTC, milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// [`RECEIPT_VERSION`].
    pub receipt_version: u32,
    /// The approval id (UUID v4).
    pub approval_id: String,
    /// The agent that proposed the call.
    pub agent: String,
    /// Its session id.
    pub session_id: String,
    /// The person the call acts for, if the agent named one.
    pub on_behalf_of: Option<String>,
    /// The approval's status when the receipt was issued.
    pub status: ApprovalStatus,
    /// The call as proposed.
    pub call: ToolCall,
    /// RFC 8785 canonical JSON of `call`.
    pub canonical: String,
    /// SHA-256 of `canonical`, lowercase hex.
    pub call_hash: String,
    /// The hash of the operator's edited call when it was approved with edits (what the
    /// token binds); `None` otherwise.
    pub approved_call_hash: Option<String>,
    /// The call's risk tier.
    pub risk_tier: RiskTier,
    /// The quorum it needed (`None`: one approval).
    pub quorum: Option<Quorum>,
    /// Whether approving needed a passkey (issue 14 §4): then every approving vote and
    /// decision must carry a passkey proof, or the receipt does not check. Absent when not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_passkey: bool,
    /// The scope it was approved for when wider than this call (`session`, `workspace` or a
    /// duration such as `15m`, seed 002 "Approve with scope"): a grant then let matching calls
    /// of the agent through without asking, until it lapsed or was revoked. Absent for a call
    /// approved once, or not approved. Found by review: a receipt read as one call approved
    /// while a standing grant let such calls run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// With `scope`: the grant let every call of the tool through, whatever its arguments
    /// (`whole_tool`), not only calls identical to this one. Absent when not (found by review:
    /// the scope alone read as "matching calls").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_tool: bool,
    /// Every vote cast on it, in voting order.
    pub votes: Vec<ReceiptVote>,
    /// The decision that settled it (at most one).
    pub decisions: Vec<ReceiptDecision>,
    /// Ids of the governance policies whose rules held it, sorted.
    pub policies: Vec<String>,
    /// SHA-256 (hex) of the policy set loaded when it was held, when recorded.
    pub policy_set_sha256: Option<String>,
    /// When the call was proposed.
    pub requested_at: String,
    /// When it was settled, if it was.
    pub decided_at: Option<String>,
    /// When this receipt was issued.
    pub issued_at: String,
    /// The signer's Ed25519 public key, 64 lowercase hex (informative: a verifier uses the
    /// key it trusts, not this field).
    pub public_key: String,
    /// Ed25519 signature of [`Receipt::signed_bytes`], 128 lowercase hex.
    pub signature: String,
}

/// One vote in a receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReceiptVote {
    /// The principal who voted.
    pub by: String,
    /// `approve` or `deny`.
    pub decision: DecisionKind,
    /// Their roles when they voted.
    pub roles: Vec<String>,
    /// When.
    pub at: String,
    /// Their reason, if any.
    pub reason: Option<String>,
    /// The passkey assertion that signed an approving vote, with the credential's public key
    /// (issue 14 §4); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub passkey: Option<PasskeyProof>,
}

/// The decision that settled an approval, in a receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReceiptDecision {
    /// `approve`, `deny`, `expire` or `cancel`.
    pub decision: Settlement,
    /// The principal (or `system:expiry`).
    pub by: String,
    /// When.
    pub at: String,
    /// The reason given, if any.
    pub reason: Option<String>,
    /// The passkey assertion that signed an approving decision (issue 14 §4); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub passkey: Option<PasskeyProof>,
}

/// Why a receipt does not check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// Another receipt format.
    #[error("receipt_version {0} is not {RECEIPT_VERSION}")]
    Version(u32),
    /// `canonical` is not the canonical form of `call`, or `call_hash` not its SHA-256.
    #[error("the call does not match its canonical form and call_hash: {0}")]
    Call(String),
    /// The signature does not hold under the key the verifier trusts.
    #[error("the signature does not verify under the given public key")]
    Signature,
    /// A vote's or decision's passkey assertion (by whom, and why) does not prove an approval
    /// of this approval's call (issue 14 §4).
    #[error("the passkey assertion of {0} does not verify: {1}")]
    Passkey(String, PasskeyError),
    /// The text is not a receipt, or holds members its signature does not cover
    /// ([`Receipt::check_text`]).
    #[error("{0}")]
    Unsigned(String),
}

impl Receipt {
    /// The bytes signed: RFC 8785 canonical JSON of the receipt without `signature`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_value(self).expect("a receipt serialises");
        if let Some(m) = v.as_object_mut() {
            m.remove("signature");
        }
        crate::canonical::canonical_value(&v)
            .expect("a receipt's JSON canonicalises")
            .into_bytes()
    }

    /// This receipt with `public_key` and `signature` set by `key`.
    pub fn signed(mut self, key: &SigningKey) -> Receipt {
        self.public_key = hex::encode(key.verifying_key().to_bytes());
        self.signature = String::new();
        self.signature = hex::encode(key.sign(&self.signed_bytes()).to_bytes());
        self
    }

    /// Checks, in this order: the format version; that `canonical` is the canonical form of
    /// `call` and `call_hash` its SHA-256; that the signature holds under `key` (strict RFC
    /// 8032; the receipt's own `public_key` is not trusted).
    pub fn check(&self, key: &VerifyingKey) -> Result<(), ReceiptError> {
        if self.receipt_version != RECEIPT_VERSION {
            return Err(ReceiptError::Version(self.receipt_version));
        }
        let c =
            CanonicalCall::new(self.call.clone()).map_err(|e| ReceiptError::Call(e.to_string()))?;
        if c.canonical() != self.canonical {
            return Err(ReceiptError::Call("canonical differs from the call".into()));
        }
        if c.call_hash() != self.call_hash {
            return Err(ReceiptError::Call(
                "call_hash is not the SHA-256 of canonical".into(),
            ));
        }
        if !signature_verifies(key, &self.signed_bytes(), &self.signature) {
            return Err(ReceiptError::Signature);
        }
        self.check_passkeys()
    }

    /// [`Receipt::check`] of the receipt whose JSON, as parsed, is `text`; the receipt read
    /// back. Every member of `text` (but `signature`) must be one the signature covers: the
    /// canonical form of `text` must be the receipt's [`Receipt::signed_bytes`]. Found by
    /// review: the reader dropped unknown members inside `call`, a passkey proof or the quorum,
    /// and defaulted an absent `deny`, so a file carrying text outside its signature verified.
    /// Errors: [`ReceiptError::Unsigned`] when `text` is not a receipt or holds such a member,
    /// and those of [`Receipt::check`].
    pub fn check_text(
        text: &serde_json::Value,
        key: &VerifyingKey,
    ) -> Result<Receipt, ReceiptError> {
        let r: Receipt = serde_json::from_value(text.clone())
            .map_err(|e| ReceiptError::Unsigned(format!("not an approval receipt: {e}")))?;
        let mut whole = text.clone();
        if let Some(m) = whole.as_object_mut() {
            m.remove("signature");
        }
        let whole = crate::canonical::canonical_value(&whole)
            .map_err(|e| ReceiptError::Unsigned(format!("not canonicalisable: {e}")))?;
        if whole.as_bytes() != r.signed_bytes() {
            return Err(ReceiptError::Unsigned(
                "the receipt holds members its signature does not cover (added, or left out where the signed form has them)".into(),
            ));
        }
        r.check(key)?;
        Ok(r)
    }

    /// Checks every passkey assertion offline ([`crate::passkey::check`]): each must sign an
    /// approval of this approval id and `call_hash`, by its credential's key, at an origin of
    /// its relying party's domain; no credential may sign for two voters; none may stand
    /// beside an edit (`approved_call_hash`), a `scope` or `whole_tool`, which it never signs
    /// (found by review: whoever held the audit key could re-sign a passkey-signed receipt
    /// with an edit or a workspace grant, and it verified beside "passkey: alice signed");
    /// none may stand on a deny; and when the approval needed a passkey, every approving vote
    /// and decision must carry one.
    pub fn check_passkeys(&self) -> Result<(), ReceiptError> {
        let votes = self
            .votes
            .iter()
            .map(|v| (&v.by, v.decision == DecisionKind::Approve, &v.passkey));
        let decisions = self
            .decisions
            .iter()
            .map(|d| (&d.by, d.decision == Settlement::Approve, &d.passkey));
        // By credential id and by public key: the id is not under the assertion's signature
        // (found by review: one key shown under two ids and two names passed).
        let mut signers: std::collections::HashMap<String, &str> = Default::default();
        for (by, approves, proof) in votes.chain(decisions) {
            match proof {
                // The gateway takes a passkey with an approval only, and every challenge it
                // makes is an approval's: one shown on a deny was moved there (found by
                // review: it verified, printed "passkey: … signed" beside the deny).
                Some(_) if !approves => {
                    return Err(ReceiptError::Passkey(
                        by.clone(),
                        crate::passkey::PasskeyError::Binding(
                            "it signs an approval, yet the receipt shows it on a deny",
                        ),
                    ));
                }
                Some(p) => {
                    crate::passkey::check(p, &self.approval_id, &self.call_hash, "approve")
                        .map_err(|e| ReceiptError::Passkey(by.clone(), e))?;
                    // The passkey signed the call as proposed, once; the gateway never takes
                    // one beside an edit or a grant, so a receipt showing both was re-signed.
                    if self.approved_call_hash.is_some() || self.scope.is_some() || self.whole_tool
                    {
                        return Err(ReceiptError::Passkey(
                            by.clone(),
                            crate::passkey::PasskeyError::Binding(
                                "it signs the call as proposed, once, yet the receipt shows an edit or a grant",
                            ),
                        ));
                    }
                    // The challenge does not name the voter: one authenticator's assertions
                    // shown under two names would count one person twice (found by review).
                    let k = &p.public_key;
                    let key = format!("key:{}:{}:{}:{:?}", k.kty, k.crv, k.x, k.y);
                    let id = format!("id:{}", p.credential_id);
                    let clash = [id, key]
                        .into_iter()
                        .any(|s| signers.insert(s, by).is_some_and(|o| o != by));
                    if clash {
                        return Err(ReceiptError::Passkey(
                            by.clone(),
                            crate::passkey::PasskeyError::Binding(
                                "its credential signed for another voter too",
                            ),
                        ));
                    }
                }
                None if approves && self.require_passkey => {
                    return Err(ReceiptError::Passkey(
                        by.clone(),
                        crate::passkey::PasskeyError::Malformed(
                            "no passkey proof, and one was required",
                        ),
                    ));
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Whether every passkey assertion in the receipt was made at `origin` (compared as
    /// origins: scheme, host and port, `https://a.example` and `https://A.example:443` alike):
    /// the dashboard's own, which the verifier knows (`assent receipt verify --origin`).
    /// Errors: [`ReceiptError::Passkey`] naming the signer whose assertion was made elsewhere,
    /// or whose client data names no origin.
    pub fn check_origin(&self, origin: &url::Url) -> Result<(), ReceiptError> {
        let want = origin.origin();
        let votes = self.votes.iter().map(|v| (&v.by, &v.passkey));
        let decisions = self.decisions.iter().map(|d| (&d.by, &d.passkey));
        for (by, proof) in votes.chain(decisions) {
            let Some(p) = proof else { continue };
            let made = p.origin().and_then(|o| url::Url::parse(&o).ok());
            if made.map(|u| u.origin()) != Some(want.clone()) {
                return Err(ReceiptError::Passkey(
                    by.clone(),
                    crate::passkey::PasskeyError::Binding("made at another origin"),
                ));
            }
        }
        Ok(())
    }
}
