//! The dashboard's forms that change something: decisions (with edits, through the same
//! `decide::decide_as` as the REST API), answers to questions, and the single-use card links
//! sent in notifications (dry runs are [`super::dry_run`]'s). Each is CSRF-checked by
//! `session::operator_form`.

use crate::decide::{Decider, decide_as};
use crate::state::{AppState, now_ms};
use assent_api::DecisionKind;
use assent_api::approvals::DecisionRequest;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::page::{Message, moving_on, page_with, secured};
use super::session::{Operator, Posted, SignedIn, message, operator_form};
use super::views::{Loaded, card, load, not_found};
use assent_store::ApprovalRecord;
use serde_json::Value;
use std::collections::HashMap;

/// `POST /ui/approvals/{id}/decide`: `decision` (`approve`|`deny`), `csrf`, and for approve
/// `scope` (`once`|`session`|`duration` with `duration`|`workspace` with
/// `confirm_workspace`), `whole_tool` (the grant covers any arguments) and `arguments` (JSON; an
/// edit when its canonical form differs), for deny `reason` (required).
pub(crate) async fn decide_form(
    State(st): State<AppState>,
    form: PostedForm,
) -> Result<Response, Response> {
    let (op, f, loaded) = form.card(&st, "Nothing was decided.").await?;
    let rec = &loaded.rec;
    let again = |status: StatusCode, why: &str| page_with(status, &card(&st, &op, &loaded, why));
    let body = match decision_body(&f, rec) {
        Ok(b) => b,
        Err(why) => return Err(again(StatusCode::BAD_REQUEST, &why)),
    };
    let id = form.id;
    let roles = op.principal.roles().unwrap_or_default();
    let who = match &op.signed_in_by_sso {
        Some(id) => {
            let sso = (
                id.as_str(),
                op.sso_groups.as_slice(),
                op.sso_provider.as_str(),
            );
            Decider::by_sso(&op.principal, roles, op.via(), sso)
        }
        None => Decider::new(&op.principal, roles, op.via()),
    };
    match decide_as(&st, &who, id.clone(), body).await {
        Ok(_) => Ok(secured(
            Redirect::to(&format!("/ui/approvals/{id}")).into_response(),
        )),
        Err(e) => Err(again(e.status, &e.message)),
    }
}

/// The decision a decide form `f` asks for on approval `rec`: an edit only when the
/// arguments' canonical form differs from the held call's. `Err` is the `400` message shown
/// on the card again (unknown scope, missing duration or denial reason, arguments that are
/// not a JSON object).
fn decision_body(
    f: &HashMap<String, String>,
    rec: &ApprovalRecord,
) -> Result<DecisionRequest, String> {
    let field = |k: &str| f.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
    Ok(match field("decision").as_str() {
        "approve" => {
            let scope = match field("scope").as_str() {
                "" | "once" => None,
                "session" => Some("session".to_string()),
                "workspace" => Some("workspace".to_string()),
                "duration" => match field("duration") {
                    d if d.is_empty() => {
                        return Err("Give a duration such as 15m or 2h.".into());
                    }
                    d => Some(d),
                },
                other => {
                    return Err(format!("Unknown scope `{other}`."));
                }
            };
            let text = f.get("arguments").cloned().unwrap_or_default();
            let arguments = if text.trim().is_empty() {
                None
            } else {
                match assent_core::json::parse_value(text.as_bytes()) {
                    Ok(v) if v.is_object() => {
                        let same_call = assent_core::canonical::canonical_value(&v).ok()
                            == Some(rec.canonical_arguments());
                        (!same_call).then_some(v)
                    }
                    Ok(_) => {
                        return Err("The arguments must be a JSON object.".into());
                    }
                    Err(e) => {
                        return Err(format!("The edited arguments are not valid JSON: {e}."));
                    }
                }
            };
            let passkey = match field("passkey").as_str() {
                "" => None,
                text => Some(
                    serde_json::from_str(text)
                        .map_err(|e| format!("The passkey's answer could not be read: {e}."))?,
                ),
            };
            DecisionRequest {
                decision: DecisionKind::Approve,
                reason: Some(field("reason")).filter(|r| !r.is_empty()),
                scope,
                whole_tool: f.contains_key("whole_tool"),
                confirm_workspace: f.contains_key("confirm_workspace"),
                arguments,
                passkey,
            }
        }
        "deny" => {
            let reason = field("reason");
            if reason.is_empty() {
                return Err("Say why the call is denied: the agent is told the reason.".into());
            }
            DecisionRequest {
                decision: DecisionKind::Deny,
                reason: Some(reason),
                scope: None,
                whole_tool: false,
                confirm_workspace: false,
                arguments: None,
                passkey: None,
            }
        }
        _ => return Err("Choose approve or deny.".into()),
    })
}

/// A number as a browser's `<input type=number>` submits it, in JSON's grammar: a leading
/// `.` gets its `0` (`.5`, `-.5`; HTML allows them, JSON does not).
fn html_number(text: &str) -> String {
    match text.strip_prefix('-') {
        Some(rest) if rest.starts_with('.') => format!("-0{rest}"),
        _ if text.starts_with('.') => format!("0{text}"),
        _ => text.to_string(),
    }
}

/// `POST /ui/clarifications/{id}/answer`: `kind` (`yes_no`|`numeric`|`multiple_choice`|
/// `freetext`), `response`, `csrf`.
pub(crate) async fn answer_form(
    State(st): State<AppState>,
    form: PostedForm,
) -> Result<Response, Response> {
    let (op, f) = form.check("Nothing was answered.").map_err(|r| *r)?;
    let field = |k: &str| f.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
    let text = field("response");
    let refused = |why: &str| message(&op, StatusCode::BAD_REQUEST, "Not answered", why);
    // Found by review: any yes/no answer but `yes` was recorded as No, and a number was read
    // as a double, so `9007199254740993` was recorded as `9007199254740992`.
    let response = match field("kind").as_str() {
        "yes_no" => match text.as_str() {
            "yes" | "true" => Value::Bool(true),
            "no" | "false" => Value::Bool(false),
            _ => return Err(refused("Choose yes or no.")),
        },
        "numeric" => match assent_core::json::exact_number(&html_number(&text)) {
            Some(n) => Value::Number(n),
            None => {
                return Err(refused(
                    "The answer must be a number a double holds exactly (a whole number at most 2^53 from zero).",
                ));
            }
        },
        _ => Value::String(text),
    };
    match crate::clarify::answer_as(&st, op.principal.name.clone(), form.id, response).await {
        Ok(_) => Ok(secured(Redirect::to("/ui").into_response())),
        Err(e) => Err(message(&op, e.status, "Not answered", &e.message)),
    }
}

/// `GET /ui/l/{token}`: a single-use link from a notification. Signed in, a valid, unused,
/// unexpired link is used up and opens the approval's card. Without a session it is only
/// looked up, never used: a live one sends to the sign-in with the link itself as `next`, so
/// that it is used by the signed-in request that follows (found by review: a mail link scanner
/// or chat preview bot fetching it without a cookie used it up, and its operator got `410`);
/// opened from another site (`Sec-Fetch-Site: cross-site` or `none`), it first answers a page
/// that steps on to the link itself ([`moving_on`]), which brings the session cookie.
/// Any other link is `410` with a page that says so.
pub(crate) async fn open_link(
    State(st): State<AppState>,
    signed: SignedIn,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let hash = assent_core::canonical::sha256_hex(token.as_bytes());
    let signed_in = signed.is_some();
    // Only a token of the form the gateway makes (64 hex digits) is looked up: anything else
    // is answered without asking the store (found by review).
    let well_formed = token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit());
    let found = st
        .store_call(move |s| {
            if !well_formed {
                Ok(None)
            } else if signed_in {
                s.use_card_link(&hash, now_ms())
            } else {
                Ok(s.card_link_live(&hash, now_ms())?.then(String::new))
            }
        })
        .await;
    let found = match found {
        Ok(f) => f,
        Err(e) => return secured(e.into_response()),
    };
    let Some(id) = found else {
        let who = signed.operator();
        return page_with(
            StatusCode::GONE,
            &Message {
                title: "Link used or expired".into(),
                text: "This link opens a card once, until the approval expires. Open the queue instead.".into(),
                who: who.as_ref().map(|o| o.principal.name.clone()).unwrap_or_default(),
                csrf: who.map(|o| o.session.csrf).unwrap_or_default(),
            },
        );
    };
    if signed_in {
        return secured(Redirect::to(&format!("/ui/approvals/{id}")).into_response());
    }
    // Live, so `token` is one the gateway made (64 hex digits): safe in a `Location`.
    let link = format!("/ui/l/{token}");
    // Clicked on another site (chat, mail): the `SameSite=Strict` session cookie did not
    // come, nor would it after a redirect; this page's own step to the link brings it (found
    // by review: a signed-in operator got the sign-in form, and signing in again ended the
    // session of their other tabs).
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "none")) {
        return moving_on(&link, "Open the approval");
    }
    secured(Redirect::to(&format!("/ui/login?next={link}")).into_response())
}

/// A form posted to `/ui/{approvals|clarifications}/{id}/ACTION`, as an extractor: the `{id}`
/// of its path and the form ([`Posted`]: its body, and its session looked up again once the
/// body was read), checked when the handler says what a refusal did not do. Rejected (before
/// any check) as the `Path` and [`Posted`] extractors reject.
pub(crate) struct PostedForm {
    /// The `{id}` of the path (an approval's or a clarification's).
    pub(crate) id: String,
    posted: Posted,
}

impl FromRequest<AppState> for PostedForm {
    type Rejection = Response;
    async fn from_request(req: Request, st: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Path(id) = Path::<String>::from_request_parts(&mut parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let posted = Posted::from_request(Request::from_parts(parts, body), st).await?;
        Ok(PostedForm { id, posted })
    }
}

impl PostedForm {
    /// The operator and the fields, once the session and the CSRF token were checked
    /// ([`operator_form`]); else the page to send, which says that `nothing` happened.
    pub(crate) fn check(
        &self,
        nothing: &str,
    ) -> Result<(Operator, HashMap<String, String>), Box<Response>> {
        operator_form(&self.posted, nothing)
    }

    /// [`PostedForm::check`], then the approval `{id}` the card form is about; else the page to
    /// send (also `404` "No such approval.", or the store's error).
    pub(crate) async fn card(
        &self,
        st: &AppState,
        nothing: &str,
    ) -> Result<(Operator, HashMap<String, String>, Loaded), Response> {
        let (op, f) = self.check(nothing).map_err(|r| *r)?;
        match load(st, &self.id).await {
            Ok(Some(loaded)) => Ok((op, f, loaded)),
            Ok(None) => Err(not_found(&op, "No such approval.")),
            Err(e) => Err(secured(e.into_response())),
        }
    }
}
