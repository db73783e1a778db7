//! The dashboard's passkeys (issue 14 §4): the list of the signed-in operator's passkeys,
//! registering one (`/ui/passkeys/register/start` and `…/finish`, called by the page's
//! script around `navigator.credentials.create()`), removing one (only within
//! `sessions::STEP_UP` of the session's sign-in: a step-up), and starting the vote
//! ceremony an approval that needs a passkey asks for (`/ui/approvals/{id}/passkey`, called
//! around `navigator.credentials.get()`; the assertion goes back in the decide form's
//! `passkey` field). Every post's session is looked up again once its body was read
//! (`session::Posted`) and CSRF-checked by `session::operator_form`; the ceremonies are
//! `crate::passkeys`'.

use crate::error::ApiError;
use crate::formats::rfc3339;
use crate::state::{AppState, now_ms};
use askama::Template;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::page::{Message, page, page_with, secured};
use super::session::{Operator, Posted, operator_form};

/// `GET /ui/passkeys`.
#[derive(Template)]
#[template(path = "passkeys.html")]
struct PasskeysPage {
    who: String,
    csrf: String,
    enabled: bool,
    /// (credential id, label, added at).
    keys: Vec<(String, String, String)>,
    /// The same, of those whose seal does not hold: they sign nothing (registered before
    /// migration 0070, or changed in the database), listed for removal.
    unsealed: Vec<(String, String, String)>,
}

/// `GET /ui/passkeys`: the signed-in operator's passkeys and the registration form.
pub(crate) async fn passkeys_page(State(st): State<AppState>, op: Operator) -> Response {
    let name = op.principal.name.clone();
    let (keys, unsealed) = st
        .store_call(move |s| Ok((s.passkeys_of(&name)?, s.unsealed_passkeys_of(&name)?)))
        .await
        .unwrap_or_default();
    let keys = keys
        .into_iter()
        .map(|k| (k.credential_id, k.label, rfc3339(k.created_at)))
        .collect();
    let unsealed = unsealed
        .into_iter()
        .map(|(id, label, at)| (id, label, rfc3339(at)))
        .collect();
    page(&PasskeysPage {
        who: op.principal.name.clone(),
        csrf: op.session.csrf.clone(),
        enabled: st.relying.is_some(),
        keys,
        unsealed,
    })
}

/// A JSON answer with the dashboard's headers; an error is its API body and status (a `429`
/// with `Retry-After`: [`crate::passkeys::refusal`]).
fn json<T: serde::Serialize>(r: Result<T, ApiError>) -> Response {
    secured(match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => crate::passkeys::refusal(e),
    })
}

/// `POST /ui/passkeys/register/start` (`csrf`, `code`: the one-time enrolment code): the
/// options for `navigator.credentials.create()` and the ceremony id, as JSON.
pub(crate) async fn register_start(
    State(st): State<AppState>,
    posted: Posted,
) -> Result<Response, Response> {
    let (op, f) = operator_form(&posted, "No passkey was registered.").map_err(|r| *r)?;
    let code = f.get("code").map(String::as_str).unwrap_or("");
    Ok(json(
        crate::passkeys::start_registration(&st, &op.principal.name, code).await,
    ))
}

/// `POST /ui/passkeys/register/finish` (`csrf`, `ceremony`, `credential`: the
/// `PublicKeyCredential` as JSON, `label`): stores the passkey; `{"credential_id"}`.
pub(crate) async fn register_finish(
    State(st): State<AppState>,
    posted: Posted,
) -> Result<Response, Response> {
    let (op, f) = operator_form(&posted, "No passkey was registered.").map_err(|r| *r)?;
    let field = |k: &str| f.get(k).cloned().unwrap_or_default();
    let r = async {
        let credential = assent_core::json::parse_value(field("credential").as_bytes())
            .map_err(|e| ApiError::bad_request(format!("credential: {e}")))?;
        let label = Some(field("label").trim().to_string())
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| "passkey".into());
        let k = crate::passkeys::finish_registration(
            &st,
            &op.principal.name,
            &field("ceremony"),
            credential,
            &label,
        )
        .await?;
        Ok(serde_json::json!({"credential_id": k.credential_id, "label": k.label}))
    }
    .await;
    Ok(json(r))
}

/// `POST /ui/passkeys/remove` (`csrf`, `credential_id`): removes one of the operator's
/// passkeys and shows the list again. Only from a session that signed in within
/// [`STEP_UP`](super::sessions::STEP_UP) (a step-up, like GitHub's "sudo mode"): otherwise
/// `403` with a page asking to sign in again, so a stolen session cookie cannot strip the
/// operator's passkeys. A single sign-on session counts from the provider's `auth_time`, so
/// only a sign-in the provider really authenticated (the step-up's `max_age=0`,
/// `super::oidc`) passes.
pub(crate) async fn remove(
    State(st): State<AppState>,
    headers: HeaderMap,
    posted: Posted,
) -> Result<Response, Response> {
    let (op, f) = operator_form(&posted, "No passkey was removed.").map_err(|r| *r)?;
    let fresh = match super::session::session_cookie(&st, &headers) {
        Some(id) => super::sessions::recently_authenticated(&st, id).await,
        None => false,
    };
    if !fresh {
        let minutes = super::sessions::STEP_UP.as_secs() / 60;
        // Single sign-on's way to sign in again makes the provider ask for the password
        // (`max_age=0`); an ordinary SSO sign-in that rode the provider's session is no step-up.
        let sso = match st.oidc.is_some() {
            true => " or by single sign-on at /ui/oidc/start?step_up=1&next=/ui/passkeys",
            false => "",
        };
        let text = format!(
            "Removing a passkey needs a recent sign-in: sign in again (with your operator key at /ui/login{sso}) and remove it within {minutes} minutes. No passkey was removed."
        );
        let m = Message {
            title: "Confirm it is you".into(),
            text,
            who: op.principal.name.clone(),
            csrf: op.session.csrf.clone(),
        };
        return Err(page_with(StatusCode::FORBIDDEN, &m));
    }
    let (name, cid) = (
        op.principal.name.clone(),
        f.get("credential_id").cloned().unwrap_or_default(),
    );
    st.store_call(move |s| s.remove_passkey(&name, &cid, now_ms()))
        .await
        .map_err(|e| secured(e.into_response()))?;
    Ok(secured(Redirect::to("/ui/passkeys").into_response()))
}

/// `POST /ui/approvals/{id}/passkey` (`csrf`): starts the operator's vote ceremony on approval
/// `id` ([`crate::passkeys::start_vote`]), as JSON.
pub(crate) async fn vote_start(
    State(st): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Result<Response, Response> {
    let (op, _) = operator_form(&posted, "Nothing was decided.").map_err(|r| *r)?;
    let roles = op.principal.roles().unwrap_or_default();
    Ok(json(
        crate::passkeys::start_vote(&st, &op.principal.name, roles, &id).await,
    ))
}
