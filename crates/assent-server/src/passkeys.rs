//! Passkey-signed approvals (issue 14 §4): the WebAuthn relying party (`webauthn-rs`), the
//! registration of an operator's passkeys (from the dashboard), and the vote ceremony whose
//! challenge binds the approval id, its `call_hash` and the decision
//! ([`assent_core::passkey::vote_challenge`]) — `POST /v1/approvals/{id}/passkey` starts it,
//! the decision carries the assertion back, and [`finish_vote`] turns it into the
//! [`PasskeyProof`] the store checks and keeps with the vote.
//!
//! `webauthn-rs` makes a random challenge; ours replaces it in both the browser's options and
//! the stored ceremony state (serialised with its `danger-allow-state-serialisation` feature),
//! so the library still checks the origin, the RP id, user verification, the signature and the
//! counter against exactly that challenge. Ceremony states live in the store (any replica
//! finishes them), single use, for [`CEREMONY_MS`].

use crate::config::passkeys::Relying;
use crate::error::ApiError;
use crate::state::{AppState, now_ms};
use assent_api::approvals::{PasskeyAssertion, PasskeyChallenge};
use assent_core::passkey::{PasskeyProof, PublicJwk, vote_challenge};
use assent_store::StoreError;
use assent_store::passkeys::{Ceremony, StoredPasskey};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;
use webauthn_rs::prelude::{
    COSEKeyType, Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Uuid,
};

/// How long a ceremony may take, in ms (the browser's own timeout is the same).
pub const CEREMONY_MS: i64 = 300_000;

/// A `500` for what should not happen (the library's state changed shape, the OS random
/// source failed): never caused by input.
fn internal(m: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", m)
}

fn relying(st: &AppState) -> Result<&Relying, ApiError> {
    st.relying.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            assent_api::error::PASSKEYS_OFF,
            "passkeys are not configured on this gateway (`passkeys` in the config)",
        )
    })
}

fn random_hex() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source");
    hex::encode(b)
}

/// `value` with the base64url challenge at `path` replaced by `challenge`.
fn with_challenge(mut value: Value, path: &[&str], challenge: &str) -> Result<Value, ApiError> {
    let mut v = &mut value;
    for k in path {
        v = v
            .get_mut(*k)
            .ok_or_else(|| internal("the WebAuthn state has an unknown shape"))?;
    }
    *v = Value::String(challenge.to_string());
    Ok(value)
}

/// The user handle of `principal`: stable, and no personal data (the SHA-256 of the name).
fn user_id(principal: &str) -> Uuid {
    let h = assent_core::canonical::sha256_hex(principal.as_bytes());
    Uuid::from_slice(&hex::decode(&h[..32]).expect("hex")).expect("16 bytes")
}

async fn passkeys_of(st: &AppState, principal: &str) -> Result<Vec<StoredPasskey>, ApiError> {
    let p = principal.to_string();
    st.store_call(move |s| s.passkeys_of(&p)).await
}

/// Starts registering a passkey for `principal` with the one-time enrolment `code` an
/// administrator issued (`assent passkeys enrol NAME`; checked here, used up only when the
/// registration finishes, [`finish_registration`]: a cancelled browser prompt keeps it): the options for
/// `navigator.credentials.create()` (ES256 only: receipts verify ES256 offline) and the
/// ceremony id. `403 ENROLMENT_REQUIRED` without a valid code: a stolen operator key or session
/// alone cannot enrol its own passkey.
pub async fn start_registration(
    st: &AppState,
    principal: &str,
    code: &str,
) -> Result<PasskeyChallenge, ApiError> {
    let rp = relying(st)?;
    let digest = assent_core::canonical::sha256_hex(code.trim().as_bytes());
    let have = passkeys_of(st, principal).await?;
    let exclude = have
        .iter()
        .filter_map(|p| serde_json::from_str::<Passkey>(&p.passkey).ok())
        .map(|p| p.cred_id().clone())
        .collect::<Vec<_>>();
    let (ccr, state) = rp
        .webauthn()
        .start_passkey_registration(user_id(principal), principal, principal, Some(exclude))
        .map_err(|e| internal(format!("passkey registration: {e}")))?;
    let mut options = serde_json::to_value(&ccr).expect("options serialise");
    options["publicKey"]["pubKeyCredParams"] =
        serde_json::json!([{"type": "public-key", "alg": -7}]);
    let mut state = serde_json::to_value(&state).expect("state serialises");
    state["rs"]["credential_algorithms"] = serde_json::json!(["ES256"]);
    let c = ceremony(principal, "register", &state);
    let ceremony_id = c.id.clone();
    // The code is checked and the ceremony stored (keeping the code's digest) in one
    // transaction, the cap checked first.
    let started = if code.trim().is_empty() {
        Ok(false)
    } else {
        st.store_task(move |s| s.start_registration(&c, &digest, now_ms()))
            .await?
    };
    match started {
        Ok(true) => Ok(PasskeyChallenge {
            ceremony: ceremony_id,
            options,
        }),
        Ok(false) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            assent_api::error::ENROLMENT_REQUIRED,
            "a passkey is registered with a one-time enrolment code: ask an administrator (`assent passkeys enrol NAME`)",
        )),
        // `start_registration`'s only `Invalid` is the cap on a principal's open ceremonies.
        Err(StoreError::Invalid(m)) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            TOO_MANY_CEREMONIES,
            m,
        )),
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

/// A new ceremony of `principal` for `purpose` keeping the library's `state`, bound to no
/// approval (a vote's fills in the approval, call hash, decision and nonce), ending
/// [`CEREMONY_MS`] from now.
fn ceremony(principal: &str, purpose: &str, state: &serde_json::Value) -> Ceremony {
    Ceremony {
        id: random_hex(),
        principal: principal.to_string(),
        purpose: purpose.into(),
        approval_id: None,
        call_hash: None,
        decision: None,
        nonce: None,
        state: state.to_string(),
        expires_at: now_ms() + CEREMONY_MS,
        code_sha256: None,
    }
}

/// Stores ceremony `c` and answers the browser's `options` with its id. `429
/// TOO_MANY_CEREMONIES` when the principal has `MAX_CEREMONIES` open already (input, not a
/// failure: [`refusal`] adds its `Retry-After`); `503` when the store fails.
async fn begin(
    st: &AppState,
    c: Ceremony,
    options: serde_json::Value,
) -> Result<PasskeyChallenge, ApiError> {
    let ceremony = c.id.clone();
    match st.store_task(move |s| s.put_ceremony(&c, now_ms())).await? {
        Ok(()) => Ok(PasskeyChallenge { ceremony, options }),
        // `put_ceremony`'s only `Invalid` is the cap on a principal's open ceremonies.
        Err(StoreError::Invalid(m)) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            TOO_MANY_CEREMONIES,
            m,
        )),
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

/// The code of the `429` past a principal's open ceremonies (`MAX_CEREMONIES`).
pub use assent_api::error::TOO_MANY_CEREMONIES;

/// The response of a ceremony's error `e`: its JSON body and status; a `429` also says
/// `Retry-After` ([`CEREMONY_MS`] in seconds: by then the oldest open ceremony has ended).
pub fn refusal(e: ApiError) -> Response {
    if e.status == StatusCode::TOO_MANY_REQUESTS {
        let wait = std::time::Duration::from_millis(CEREMONY_MS.unsigned_abs());
        return crate::throttle::too_many(e.code, &e.message, wait);
    }
    e.into_response()
}

/// Finishes registration `ceremony` of `principal` with the browser's `credential`; stores the
/// passkey under `label`, using up the enrolment code the ceremony was started with in the
/// same transaction. `400` for a ceremony that is unknown, someone else's, expired or used, or
/// a credential the relying party refuses; `403 ENROLMENT_REQUIRED` when the code is gone
/// (another ceremony started with it finished first) or expired: one code, one passkey.
pub async fn finish_registration(
    st: &AppState,
    principal: &str,
    ceremony: &str,
    credential: Value,
    label: &str,
) -> Result<StoredPasskey, ApiError> {
    let rp = relying(st)?;
    let c = take(st, ceremony, principal, "register").await?;
    let state: PasskeyRegistration = serde_json::from_str(&c.state)
        .map_err(|_| ApiError::bad_request("the ceremony state cannot be read"))?;
    let cred: RegisterPublicKeyCredential = serde_json::from_value(credential)
        .map_err(|e| ApiError::bad_request(format!("credential: {e}")))?;
    let pk = rp
        .webauthn()
        .finish_passkey_registration(&cred, &state)
        .map_err(|e| ApiError::bad_request(format!("the passkey was not accepted: {e}")))?;
    let public_key = jwk(&pk)
        .ok_or_else(|| ApiError::bad_request("only ES256 (P-256) passkeys are accepted"))?;
    let stored = StoredPasskey {
        credential_id: B64.encode(pk.cred_id().as_slice()),
        principal: principal.to_string(),
        passkey: serde_json::to_string(&pk).expect("passkey serialises"),
        public_key,
        label: label.chars().take(100).collect(),
        created_at: now_ms(),
    };
    let s2 = stored.clone();
    // Every registration uses up an enrolment code. Found by review: a registration ceremony
    // without one (those started before migration 0056, long expired) registered the passkey
    // unenrolled, so a database writer holding an operator's key planted such a ceremony and
    // enrolled an authenticator with no `passkey.enrolment_issued` behind it.
    let added = st
        .store_task(move |s| match &c.code_sha256 {
            Some(code) => s.add_enrolled_passkey(&s2, code, now_ms()),
            None => Ok(false),
        })
        .await?;
    // A credential registered already (a client sending one again) is the caller's mistake,
    // not the store's: `409 PASSKEY_TAKEN`, not `503` (found by review).
    match added {
        Ok(true) => Ok(stored),
        Ok(false) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            assent_api::error::ENROLMENT_REQUIRED,
            "the enrolment code was used by another registration or has expired: ask an administrator for a new one (`assent passkeys enrol NAME`)",
        )),
        Err(assent_store::StoreError::Invalid(why)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            assent_api::error::PASSKEY_TAKEN,
            why,
        )),
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

/// The public key of `pk` as a JWK, for a P-256 key.
fn jwk(pk: &Passkey) -> Option<PublicJwk> {
    match &pk.get_public_key().key {
        COSEKeyType::EC_EC2(k) => Some(PublicJwk {
            kty: "EC".into(),
            crv: "P-256".into(),
            x: B64.encode(k.x.as_ref()),
            y: Some(B64.encode(k.y.as_ref())),
        })
        .filter(|_| format!("{:?}", k.curve) == "SECP256R1"),
        _ => None,
    }
}

async fn take(
    st: &AppState,
    id: &str,
    principal: &str,
    purpose: &'static str,
) -> Result<Ceremony, ApiError> {
    let (id, p) = (id.to_string(), principal.to_string());
    st.store_call(move |s| s.take_ceremony(&id, &p, purpose, now_ms()))
        .await?
        .ok_or_else(|| {
            ApiError::bad_request(
                "no such passkey ceremony of yours in progress (unknown, expired or used: start again)",
            )
        })
}

/// `POST /v1/approvals/{id}/passkey` and the dashboard's: starts the vote ceremony of
/// `principal` on pending approval `id`; the challenge binds `id`, its `call_hash` and
/// `approve`. `404` for no such approval, `409` when it is not pending, `409 NO_PASSKEY` when
/// the principal has none registered, `409 PASSKEYS_OFF`.
pub async fn start_vote(
    st: &AppState,
    principal: &str,
    roles: &[String],
    id: &str,
) -> Result<PasskeyChallenge, ApiError> {
    let rp = relying(st)?;
    let aid = id.to_string();
    let rec = st
        .store_call(move |s| s.get_approval(&aid))
        .await?
        .ok_or_else(|| ApiError::not_found("no such approval"))?;
    // Only someone who may decide it starts a ceremony on it (no ceremonies piled up by
    // operators who could never use them).
    if !assent_core::approval::may_decide(&rec.terms.approvers, roles) {
        return Err(ApiError::forbidden(format!(
            "`{principal}` has none of the approver roles of this approval ({})",
            rec.terms.approvers.join(", ")
        )));
    }
    if rec.status != assent_core::ApprovalStatus::Pending {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "ALREADY_DECIDED",
            "the approval is no longer pending",
        )
        .with_status(rec.status));
    }
    let keys: Vec<Passkey> = passkeys_of(st, principal)
        .await?
        .iter()
        .filter_map(|p| serde_json::from_str(&p.passkey).ok())
        .collect();
    if keys.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            assent_api::error::NO_PASSKEY,
            format!("`{principal}` has no passkey: register one in the dashboard (Passkeys)"),
        ));
    }
    let (rcr, state) = rp
        .webauthn()
        .start_passkey_authentication(&keys)
        .map_err(|e| internal(format!("passkey authentication: {e}")))?;
    let nonce = random_hex();
    let challenge = B64.encode(vote_challenge(&rec.id, &rec.call_hash, "approve", &nonce));
    let options = with_challenge(
        serde_json::to_value(&rcr).expect("options serialise"),
        &["publicKey", "challenge"],
        &challenge,
    )?;
    let state = with_challenge(
        serde_json::to_value(&state).expect("state serialises"),
        &["ast", "challenge"],
        &challenge,
    )?;
    let c = Ceremony {
        approval_id: Some(rec.id.clone()),
        call_hash: Some(rec.call_hash.clone()),
        decision: Some("approve".into()),
        nonce: Some(nonce),
        ..ceremony(principal, "vote", &state)
    };
    begin(st, c, options).await
}

/// Finishes `principal`'s vote ceremony `a` for approval `id`: `webauthn-rs` checks the
/// assertion against the ceremony's challenge, origin, RP id, user verification and one of the
/// principal's passkeys; the counter is stored; the proof for the store is returned. `400`
/// (`PASSKEY_INVALID`) when any of it fails, or the ceremony was for another approval.
pub async fn finish_vote(
    st: &AppState,
    principal: &str,
    id: &str,
    a: PasskeyAssertion,
) -> Result<PasskeyProof, ApiError> {
    let rp = relying(st)?;
    let invalid = |m: String| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            assent_api::error::PASSKEY_INVALID,
            m,
        )
    };
    let c = take(st, &a.ceremony, principal, "vote").await?;
    if c.approval_id.as_deref() != Some(id) {
        return Err(invalid(
            "the passkey ceremony was started for another approval".into(),
        ));
    }
    let state: PasskeyAuthentication = serde_json::from_str(&c.state)
        .map_err(|_| invalid("the ceremony state cannot be read".into()))?;
    let cred: PublicKeyCredential =
        serde_json::from_value(a.credential).map_err(|e| invalid(format!("credential: {e}")))?;
    let res = rp
        .webauthn()
        .finish_passkey_authentication(&cred, &state)
        .map_err(|e| invalid(format!("the passkey assertion was not accepted: {e}")))?;
    let credential_id = B64.encode(cred.raw_id.as_slice());
    let stored = passkeys_of(st, principal)
        .await?
        .into_iter()
        .find(|p| p.credential_id == credential_id)
        .ok_or_else(|| invalid("the passkey is not one registered to you".into()))?;
    let mut pk = serde_json::from_str::<Passkey>(&stored.passkey)
        .map_err(|_| invalid("the stored passkey cannot be read".into()))?;
    pk.update_credential(&res);
    let (cid, json, counter) = (
        credential_id.clone(),
        serde_json::to_string(&pk).expect("passkey"),
        res.counter(),
    );
    // Checked against the stored counter in the store's transaction, not only against the one
    // read when the ceremony started (a cloned authenticator inside an older ceremony).
    if !st
        .store_call(move |s| s.advance_passkey(&cid, &json, counter))
        .await?
    {
        return Err(invalid(
            "the passkey's signature counter did not move past the one stored: a cloned authenticator, or an assertion used already".into(),
        ));
    }
    Ok(PasskeyProof {
        credential_id,
        public_key: stored.public_key,
        rp_id: rp.rp_id().to_string(),
        nonce: c.nonce.unwrap_or_default(),
        authenticator_data: B64.encode(cred.response.authenticator_data.as_slice()),
        client_data_json: B64.encode(cred.response.client_data_json.as_slice()),
        signature: B64.encode(cred.response.signature.as_slice()),
    })
}

/// `POST /v1/approvals/{id}/passkey` (operators who may decide): starts the caller's vote
/// ceremony on approval `id` ([`start_vote`]); `429 TOO_MANY_CEREMONIES` with `Retry-After`
/// past the caller's open ceremonies.
#[utoipa::path(post, path = "/v1/approvals/{id}/passkey", tag = "decide",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 200, description = "The WebAuthn assertion options and the ceremony id", body = assent_api::approvals::PasskeyChallenge),
        (status = 429, description = "TOO_MANY_CEREMONIES: 16 passkey ceremonies of this principal are open already; see Retry-After", body = assent_api::error::ApiErrorBody)),
    security(("operator_key" = [])))]
pub(crate) async fn vote_ceremony(
    axum::extract::State(st): axum::extract::State<AppState>,
    op: crate::extract::Operator<crate::extract::DecideApprovals>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<crate::body::Body<PasskeyChallenge>, Response> {
    let c = start_vote(&st, op.name(), op.roles(), &id).await;
    Ok(crate::body::Body(c.map_err(refusal)?))
}
