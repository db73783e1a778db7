//! The only file that mounts routes: every `/v1`, `/aaep/v1` and `/ui` route of the gateway,
//! by step of the approval's life cycle, each wired to the handler its module exports, with
//! JSON `404`/`405` fallbacks. The edge layers (throttle, body limits, timeouts, caught panics)
//! are added around these by [`crate::app`]. Handlers live in their modules; none of them
//! imports this file.

use crate::error::ApiError;
use crate::state::AppState;
use crate::whoami;
use crate::{aaep, approvals, checkpoints, clarify, dashboard, decide, gate, receipts};
use crate::{insights, jwks, learning, plans, policies, reload, results, tokens, tools, webhooks};
use axum::Router;
use axum::http::StatusCode;
use axum::response::Redirect;
use axum::routing::{delete, get, post};

/// Every route of the gateway with JSON 404/405 fallbacks, without the edge layers (see
/// [`crate::app`], which adds them around these and any extra routes).
pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(whoami::healthz))
        .route("/openapi.json", get(crate::openapi::document))
        .route("/readyz", get(whoami::ready))
        .route("/metrics", get(crate::scrape::scrape))
        .merge(propose())
        .merge(decide())
        .merge(redeem())
        .merge(around())
        .merge(aaep())
        .merge(ui())
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "method not allowed on this route",
            )
        })
        .layer(axum::middleware::from_fn(crate::calls::refuse_nul))
        .with_state(state)
}

/// Proposing: tool calls, delegations, held results, MPLP plans and Confirms, questions.
fn propose() -> Router<AppState> {
    Router::new()
        .route("/v1/tool-calls", post(gate::propose))
        .route("/v1/delegations", post(gate::delegate))
        .route("/v1/tool-results", post(results::tool_result))
        .route("/v1/plans", post(plans::create))
        .route("/v1/plans/{id}", get(plans::read).put(plans::update))
        .route("/v1/plans/{id}/submit", post(plans::submit))
        .route("/v1/plans/{id}/cancel", post(plans::cancel))
        .route(
            "/v1/plans/{id}/pipeline-events",
            get(plans::pipeline_events),
        )
        .route("/v1/confirms", post(plans::confirm))
        .route("/v1/clarifications", post(clarify::ask).get(clarify::list))
        .route("/v1/clarifications/{id}", get(clarify::read))
        .route("/v1/clarifications/{id}/answer", post(clarify::answer))
}

/// Reading and deciding approvals, cancelling them.
fn decide() -> Router<AppState> {
    Router::new()
        .route("/v1/approvals", get(approvals::list_approvals))
        .route("/v1/approvals/{id}", get(approvals::get_approval))
        .route("/v1/approvals/decisions", post(decide::decide_batch))
        .route("/v1/approvals/{id}/decision", post(decide::decide))
        .route(
            "/v1/approvals/{id}/passkey",
            post(crate::passkeys::vote_ceremony),
        )
        .route("/v1/approvals/{id}/receipt", get(receipts::receipt))
        .route("/v1/approvals/{id}/cancel", post(decide::cancel_approval))
        .route(
            "/v1/approvals/{id}/user-decision",
            post(decide::user_decision),
        )
        .route("/v1/sessions/{id}/cancel", post(decide::cancel_session))
}

/// Redeeming tokens, the token keys (JWKS, no key needed) and managing grants.
fn redeem() -> Router<AppState> {
    Router::new()
        .route("/v1/tokens/redeem", post(tokens::redeem))
        .route("/v1/keys", get(jwks::jwks))
        .route("/.well-known/jwks.json", get(jwks::jwks))
        .route("/v1/grants", get(tokens::list_grants))
        .route("/v1/grants/{id}", delete(tokens::revoke_grant))
}

/// Around the life cycle: who a key is, declared and pinned tools, learning samples, audit
/// checkpoints, webhook dead letters, insights, live reload.
fn around() -> Router<AppState> {
    Router::new()
        .route("/v1/whoami", get(whoami::whoami))
        .route(
            "/v1/agents/{agent}/mcp-servers/{alias}/tools",
            get(whoami::declared_tools),
        )
        .route("/v1/learning-samples", get(learning::learning_samples))
        .route("/v1/tools/check", post(tools::check))
        .route("/v1/tools/reviews", get(tools::list))
        .route("/v1/tools/reviews/{id}", get(tools::read))
        .route("/v1/tools/reviews/{id}/accept", post(tools::accept))
        .route("/v1/tools/reviews/{id}/reject", post(tools::reject))
        .route("/v1/tools/pins", get(tools::pins))
        .route("/v1/audit/checkpoints", get(checkpoints::list))
        .route("/v1/webhooks/dead-letters", get(webhooks::dead_letters))
        .route("/v1/insights", get(insights::insights))
        .route("/v1/reload", post(reload::reload_route))
        .route("/v1/policies/replay", post(policies::replay))
        .route(
            "/v1/integrations/slack/interactions",
            post(crate::slack::interactions),
        )
}

/// The AAEP HTTP binding (Appendix B.1).
fn aaep() -> Router<AppState> {
    Router::new()
        .route("/aaep/v1/subscriptions", post(aaep::subscribe))
        .route("/aaep/v1/events", get(aaep::events))
        .route("/aaep/v1/replies", post(aaep::replies))
}

/// The operator dashboard under `/ui`.
fn ui() -> Router<AppState> {
    use dashboard::{forms, page, session, views};
    Router::new()
        .route("/ui", get(views::queue_page))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/login", get(session::login_page).post(session::login))
        .route("/ui/logout", post(session::logout))
        .route("/ui/oidc/start", get(dashboard::oidc::start))
        .route("/ui/oidc/callback", get(dashboard::oidc::callback))
        .route("/ui/queue", get(views::queue_fragment))
        .route("/ui/events", get(views::events))
        .route("/ui/approvals/{id}", get(views::card_page))
        .route("/ui/approvals/{id}/decide", post(forms::decide_form))
        .route(
            "/ui/approvals/{id}/dry-run",
            post(dashboard::dry_run::dry_run_form),
        )
        .route(
            "/ui/approvals/{id}/passkey",
            post(dashboard::passkeys::vote_start),
        )
        .route("/ui/passkeys", get(dashboard::passkeys::passkeys_page))
        .route(
            "/ui/passkeys/register/start",
            post(dashboard::passkeys::register_start),
        )
        .route(
            "/ui/passkeys/register/finish",
            post(dashboard::passkeys::register_finish),
        )
        .route("/ui/passkeys/remove", post(dashboard::passkeys::remove))
        .route("/ui/clarifications/{id}/answer", post(forms::answer_form))
        .route("/ui/history", get(views::history_page))
        .route("/ui/audit", get(views::audit_page))
        .route("/ui/insights", get(dashboard::insights::insights_page))
        .route(
            "/ui/insights/suggestions/{n}",
            get(dashboard::suggested::export_suggestion),
        )
        .route("/ui/l/{token}", get(forms::open_link))
        .route("/ui/static/app.js", get(page::script))
        .route("/ui/static/app.css", get(page::style))
}
