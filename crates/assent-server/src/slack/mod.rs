//! Approving from Slack (issue 15 §4): `POST /v1/integrations/slack/interactions`, Slack's
//! interactivity request URL. It needs no API key (Slack cannot send one): the request's
//! signature is its authentication ([`verify`]: HMAC with the signing secret, timestamp within
//! 5 minutes, each signed request once). Without `slack:` in the config the route answers 404.
//!
//! - A button click (`block_actions`) carries `APPROVAL_ID|CALL_HASH` in its value: the call's
//!   hash must still be the approval's, or nothing is decided (a card hiding a redacted value
//!   carries `redacted` instead: [`blocks::binding`]). "Approve once" and "Approve for
//!   the session" (only where the dashboard offers it) decide at once; "Deny…" opens a modal
//!   asking for a reason (`views.open`, with the bot token; without it the click denies with
//!   no reason), whose `view_submission` comes back here. A card that cuts the call or shows
//!   any argument as `[redacted]` offers no approve button, and an approve click on it is
//!   refused (`CARD_TRUNCATED`, `CARD_REDACTED`: [`blocks::approve_withheld`]).
//! - The Slack user must be mapped to an operator (`principals[].slack_user_id`); the decision
//!   is made as that operator through the same path as the API's and the dashboard's
//!   (`crate::decide::decide_as`: approver roles, quorum votes, separation of duties, passkey
//!   requirement). An unmapped user never decides, at any risk tier; an approval that needs a
//!   passkey is approved on the dashboard only.
//! - The clicker is told what happened in an ephemeral reply (`response_url`); the message
//!   itself is updated by [`outbox`] with the bot token, or replaced through `response_url`
//!   without it. The HTTP answer is `200` with `{"ok", "code", "text"}` for a click, and
//!   Slack's `response_action` for a modal; a bad or unsigned request is a 4xx JSON error.

pub mod api;
pub mod blocks;
pub mod outbox;
pub mod verify;

use crate::config::slack::Slack;
use crate::error::ApiError;
use crate::state::AppState;
use assent_api::DecisionKind;
use assent_api::approvals::DecisionRequest;
use assent_core::ApprovalStatus;
use assent_store::ApprovalRecord;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// The largest request body accepted, in bytes (Slack's payloads of our messages are far
/// smaller); larger is `413 PAYLOAD_TOO_LARGE` before the signature is checked. The edge
/// holds the route's body to the same figure (`edge::SLACK_BODY_BYTES`) before any handler
/// reads it.
pub const MAX_BODY: usize = 64 * 1024;

/// What a click came to: whether a decision was recorded, a stable code, and the text the
/// clicker is shown.
struct Reply {
    ok: bool,
    code: &'static str,
    text: String,
}

impl Reply {
    fn no(code: &'static str, text: impl Into<String>) -> Self {
        Self {
            ok: false,
            code,
            text: text.into(),
        }
    }
}

/// The path of Slack's interactivity requests ([`interactions`]; `router.rs` mounts it as a
/// literal, which the OpenAPI test reads).
pub(crate) const INTERACTIONS_PATH: &str = "/v1/integrations/slack/interactions";

/// `POST /v1/integrations/slack/interactions`: see the module documentation.
#[utoipa::path(post, path = "/v1/integrations/slack/interactions", tag = "decide",
    description = "Slack's interactivity requests (a form with `payload=` JSON). No API key: authenticated by Slack's v0 request signature (X-Slack-Signature over v0:timestamp:body, X-Slack-Request-Timestamp within 5 minutes, each request once). 404 when `slack:` is not configured.",
    params(
        ("x-slack-signature" = String, Header, description = "v0= and 64 lower-case hex digits"),
        ("x-slack-request-timestamp" = String, Header, description = "Unix seconds"),
    ),
    request_body(content_type = "application/x-www-form-urlencoded", content = String),
    responses((status = 200, description = "What the clicker is told (ok, code, text)", body = Object)),
    security(()))]
pub(crate) async fn interactions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(slack) = st.slack.clone() else {
        return ApiError::not_found("no such route").into_response();
    };
    if body.len() > MAX_BODY {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!("a Slack interaction is at most {MAX_BODY} bytes"),
        )
        .into_response();
    }
    if let Err(e) = verify::verify(&st, &slack.signing_secret, &headers, &body).await {
        tracing::warn!(code = e.code, "slack: request refused");
        return e.into_response();
    }
    let payload = match parse(&body) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(e) = other_workspace(&slack.config, &payload) {
        tracing::warn!(code = e.code, "slack: request refused");
        return e.into_response();
    }
    match payload["type"].as_str() {
        Some("block_actions") => block_action(&st, &slack, &payload).await,
        Some("view_submission") => view_submission(&st, &slack, &payload).await,
        other => {
            let kind = other.unwrap_or("none");
            (
                StatusCode::OK,
                axum::Json(json!({"ok": true, "code": "IGNORED",
                "text": format!("interaction type `{kind}` is not handled")})),
            )
                .into_response()
        }
    }
}

/// Why interaction `p` may decide nothing under `config`'s `team_id`: its workspace
/// (`team.id`) is not that one, or its clicker's (`user.team_id`, when given) is another.
/// Found by review: the clicker was known by `user.id` alone, so a correctly signed click from
/// another workspace the same app is installed in (a staging one, an org-wide install) decided
/// as the operator mapped to that user id.
fn other_workspace(config: &crate::config::slack::SlackConfig, p: &Value) -> Option<ApiError> {
    let pinned = config.team_id.as_deref()?;
    let team = p["team"]["id"].as_str();
    let users = p["user"]["team_id"].as_str();
    if team == Some(pinned) && users.is_none_or(|u| u == pinned) {
        return None;
    }
    Some(ApiError::new(
        StatusCode::FORBIDDEN,
        "SLACK_WRONG_WORKSPACE",
        format!(
            "this interaction comes from Slack workspace {}, not {pinned} (slack.team_id)",
            team.filter(|t| crate::config::slack::slack_team_id_ok(t))
                .unwrap_or("(none)")
        ),
    ))
}

/// The JSON of the form field `payload`: `400` when the body is not a form with one.
fn parse(body: &[u8]) -> Result<Value, ApiError> {
    let form: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|_| ApiError::bad_request("the body is not a form (payload=JSON)"))?;
    let text = form
        .iter()
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v)
        .ok_or_else(|| ApiError::bad_request("the form has no `payload` field"))?;
    let v: Value =
        serde_json::from_str(text).map_err(|_| ApiError::bad_request("`payload` is not JSON"))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("`payload` is not a JSON object"));
    }
    Ok(v)
}

/// `APPROVAL_ID|CALL_HASH` split; `None` when malformed.
fn split_value(v: &str) -> Option<(String, String)> {
    let (id, hash) = v.split_once('|')?;
    let ok = |s: &str| !s.is_empty() && s.len() <= 128 && !s.contains('|');
    (ok(id) && ok(hash)).then(|| (id.to_string(), hash.to_string()))
}

/// The operator Slack user `user` is (its name and roles), or why nobody.
fn operator_of(st: &AppState, user: &str) -> Result<(String, Vec<String>), Reply> {
    let unmapped = || {
        Reply::no(
            "SLACK_USER_UNMAPPED",
            format!(
                "Your Slack account ({user}) is not mapped to an assent operator, so it cannot decide anything. Ask an administrator to set principals[].slack_user_id, or use the dashboard."
            ),
        )
    };
    let live = st.live();
    let name = live.slack_users.get(user).ok_or_else(unmapped)?;
    let principals = &live.principals;
    let p = principals
        .iter()
        .find(|p| &p.name == name)
        .ok_or_else(unmapped)?;
    match p.roles() {
        Some(roles) => Ok((p.name.clone(), roles.to_vec())),
        None => Err(unmapped()),
    }
}

/// The approval `id` if its call is still `hash` (its card's [`blocks::binding`]); else why
/// not.
async fn approval_for(st: &AppState, id: &str, hash: &str) -> Result<ApprovalRecord, Reply> {
    let id2 = id.to_string();
    let a = st
        .store_call(move |s| s.get_approval(&id2))
        .await
        .map_err(|e| Reply::no("UNAVAILABLE", e.message))?
        .ok_or_else(|| Reply::no("NOT_FOUND", "This approval no longer exists."))?;
    if blocks::binding(&a) != hash {
        return Err(Reply::no(
            "CALL_CHANGED",
            "This message does not show the call the approval is about (its call hash differs); nothing was decided. Open it in the dashboard.",
        ));
    }
    Ok(a)
}

/// With the bot token, the buttons that decide are those of the message the bot posted for
/// approval `id` (its channel and `ts`, stored when it was posted): a click on another
/// message — one posted through the same app or its webhook beside text of someone else's
/// making, with a copied button value — decides nothing. The stored reference is waited for
/// up to 2 s (a click can follow the post before the post's answer is stored).
async fn from_our_message(st: &AppState, p: &Value, id: &str) -> Result<(), Reply> {
    let (channel, ts) = (
        p["container"]["channel_id"].as_str().unwrap_or(""),
        p["container"]["message_ts"].as_str().unwrap_or(""),
    );
    for _ in 0..40 {
        let id2 = id.to_string();
        let stored = st
            .store_call(move |s| s.slack_message(&id2))
            .await
            .map_err(|e| Reply::no("UNAVAILABLE", e.message))?;
        if let Some(m) = stored {
            return if (m.channel.as_str(), m.ts.as_str()) == (channel, ts) {
                Ok(())
            } else {
                Err(Reply::no(
                    "NOT_ASSENTS_MESSAGE",
                    "These buttons are not on the message assent posted for this approval; nothing was decided. Use assent's message or the dashboard.",
                ))
            };
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err(Reply::no(
        "NOT_ASSENTS_MESSAGE",
        "assent posted no message for this approval; nothing was decided. Use the dashboard.",
    ))
}

/// Decides `a` as operator `name` (holding `roles`), from the Slack account `user`, through
/// the API's decision path.
async fn decide(
    st: &AppState,
    (name, roles, user): (&str, &[String], &str),
    a: &ApprovalRecord,
    decision: DecisionKind,
    scope: &str,
    reason: Option<String>,
) -> Reply {
    if decision == DecisionKind::Approve && a.terms.require_passkey {
        return Reply::no(
            "PASSKEY_REQUIRED",
            "Approving this call needs your passkey: use the dashboard.",
        );
    }
    let b = DecisionRequest {
        decision,
        reason,
        scope: Some(scope.into()),
        whole_tool: false,
        confirm_workspace: false,
        arguments: None,
        passkey: None,
    };
    let via = assent_store::Via::channel("slack");
    let who = crate::decide::Decider::by_slack(name, roles, via, user);
    match crate::decide::decide_as(st, &who, a.id.clone(), b).await {
        Ok(rec) if rec.status == ApprovalStatus::Pending => Reply {
            ok: true,
            code: "VOTE_COUNTED",
            text: format!("Your vote was counted: {}", blocks::outcome(&rec)),
        },
        Ok(rec) => Reply {
            ok: true,
            code: "DECIDED",
            text: blocks::outcome(&rec),
        },
        Err(e) if e.code == "PASSKEY_REQUIRED" => Reply::no(
            "PASSKEY_REQUIRED",
            "Approving this call needs your passkey: use the dashboard.",
        ),
        Err(e) => Reply::no(e.code, e.message),
    }
}

/// A button click.
async fn block_action(st: &AppState, slack: &Arc<Slack>, p: &Value) -> Response {
    let action = &p["actions"][0];
    let response_url = p["response_url"].as_str().map(str::to_string);
    let reply = click(st, slack, p, action, response_url.as_deref()).await;
    let Some(reply) = reply else {
        // A modal was opened: the decision comes with its submission.
        return axum::Json(
            json!({"ok": true, "code": "MODAL_OPENED", "text": "asked for a reason"}),
        )
        .into_response();
    };
    if let Some(url) = response_url {
        let (st, slack) = (st.clone(), slack.clone());
        let (ok, text) = (reply.ok, reply.text.clone());
        let value = action["value"].as_str().and_then(split_value);
        tokio::spawn(async move { answer(&st, &slack, &url, ok, &text, value).await });
    }
    axum::Json(json!({"ok": reply.ok, "code": reply.code, "text": reply.text})).into_response()
}

/// Handles click `action` of payload `p`: the reply, or `None` when a modal was opened.
async fn click(
    st: &AppState,
    slack: &Slack,
    p: &Value,
    action: &Value,
    response_url: Option<&str>,
) -> Option<Reply> {
    let Some((id, hash)) = action["value"].as_str().and_then(split_value) else {
        return Some(Reply::no(
            "BAD_VALUE",
            "This button is not an assent decision.",
        ));
    };
    let user = p["user"]["id"].as_str().unwrap_or("");
    let who = match operator_of(st, user) {
        Ok(w) => w,
        Err(r) => return Some(r),
    };
    let a = match approval_for(st, &id, &hash).await {
        Ok(a) => a,
        Err(r) => return Some(r),
    };
    if slack.bot_token.is_some()
        && let Err(r) = from_our_message(st, p, &id).await
    {
        return Some(r);
    }
    let who = (who.0.as_str(), who.1.as_slice(), user);
    let action_id = action["action_id"].as_str().unwrap_or("");
    let approves = [blocks::APPROVE_ONCE, blocks::APPROVE_SESSION].contains(&action_id);
    // Found by review: without the bot, a click cannot be tied to a message the gateway
    // posted, and an agent holding the incoming webhook's URL could post its own words with
    // a genuine Approve button (the approval id and call hash it reads from the API).
    if approves && slack.bot_token.is_none() {
        return Some(Reply::no(
            "APPROVE_NEEDS_BOT",
            "Approving from Slack needs the assent bot (slack.bot_token_env), which ties each button to the message it posted; open the call in assent to approve it.",
        ));
    }
    // A card that cut the call, or hid some argument behind `[redacted]`, offers no approve
    // button; a click forged from its deny button's value is refused the same way.
    if approves && let Some(w) = blocks::approve_withheld(&a) {
        return Some(Reply::no(w.code, w.text));
    }
    Some(match action_id {
        blocks::APPROVE_ONCE => decide(st, who, &a, DecisionKind::Approve, "once", None).await,
        blocks::APPROVE_SESSION if !blocks::offers_session(&a) => Reply::no(
            "SESSION_NOT_OFFERED",
            "This call cannot be approved for the whole session; approve it once or use the dashboard.",
        ),
        blocks::APPROVE_SESSION => {
            decide(st, who, &a, DecisionKind::Approve, "session", None).await
        }
        blocks::DENY if slack.bot_token.is_some() => {
            let trigger = p["trigger_id"].as_str().unwrap_or("");
            let meta = format!("{id}|{hash}|{}", response_url.unwrap_or(""));
            let body = json!({"trigger_id": trigger, "view": blocks::deny_modal(&a, &meta)});
            match api::call(slack, "views.open", &body).await {
                Ok(_) => return None,
                Err(e) => Reply::no(
                    "SLACK_UNAVAILABLE",
                    format!("The reason form could not be opened ({e})."),
                ),
            }
        }
        blocks::DENY => decide(st, who, &a, DecisionKind::Deny, "once", None).await,
        _ => Reply::no("BAD_ACTION", "This button is not an assent decision."),
    })
}

/// Tells the clicker `text` through `response_url`: an ephemeral reply, and without the bot
/// token (which updates the message itself) the message replaced by its current state after
/// a decision on approval `value.0`.
async fn answer(
    st: &AppState,
    slack: &Slack,
    url: &str,
    ok: bool,
    text: &str,
    value: Option<(String, String)>,
) {
    if ok
        && slack.bot_token.is_none()
        && let Some((id, _)) = value
        // Checked as the first post was (found by review: the redraw after a quorum's deny
        // vote, the approval still pending, read the record plainly, so the warning of a
        // record whose seal fails went away).
        && let Ok(Some(a)) = st.store_call(move |s| s.checked_approval(&id)).await
    {
        let mut m = outbox::current(st, &a);
        m["replace_original"] = json!(true);
        api::respond(slack, url, &m).await;
        return;
    }
    let body = json!({"response_type": "ephemeral", "replace_original": false, "text": text});
    api::respond(slack, url, &body).await;
}

/// The deny modal's submission: denies with the reason given, or shows why not in the modal.
async fn view_submission(st: &AppState, slack: &Arc<Slack>, p: &Value) -> Response {
    let view = &p["view"];
    if view["callback_id"].as_str() != Some(blocks::DENY_MODAL) {
        return axum::Json(json!({"response_action": "clear"})).into_response();
    }
    let meta = view["private_metadata"].as_str().unwrap_or("");
    let (value, response_url) = match meta.split_once('|').and_then(|(id, rest)| {
        let (hash, url) = rest.split_once('|')?;
        Some((split_value(&format!("{id}|{hash}"))?, url.to_string()))
    }) {
        Some(x) => x,
        None => return modal_error("This form is not an assent decision."),
    };
    let reason = view["state"]["values"][blocks::REASON][blocks::REASON]["value"]
        .as_str()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let Some(reason) = reason else {
        return modal_error("Give a reason: the agent is told.");
    };
    let user = p["user"]["id"].as_str().unwrap_or("");
    let reply = match operator_of(st, user) {
        Err(r) => r,
        Ok((name, roles)) => match approval_for(st, &value.0, &value.1).await {
            Err(r) => r,
            Ok(a) => {
                decide(
                    st,
                    (&name, &roles, user),
                    &a,
                    DecisionKind::Deny,
                    "once",
                    Some(reason),
                )
                .await
            }
        },
    };
    if !reply.ok {
        return modal_error(&reply.text);
    }
    if !response_url.is_empty() {
        let (st, slack, text) = (st.clone(), slack.clone(), reply.text.clone());
        tokio::spawn(
            async move { answer(&st, &slack, &response_url, true, &text, Some(value)).await },
        );
    }
    axum::Json(json!({"response_action": "clear"})).into_response()
}

/// The modal's answer showing `text` under the reason field (nothing was decided).
fn modal_error(text: &str) -> Response {
    axum::Json(json!({"response_action": "errors",
        "errors": {blocks::REASON: assent_core::summary::cut(text, 150)}}))
    .into_response()
}
