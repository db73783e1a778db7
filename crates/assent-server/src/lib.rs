//! assent-server: the HTTP API of the assent gateway.
//!
//! [`router()`] serves `POST /v1/tool-calls` (gatekeeper + durable approval), approval reads and
//! long-polls, operator decisions, token redemption and `/healthz`; [`run`] serves it on a bound
//! listener with graceful shutdown and an expiry timer. Authentication is by bearer key against
//! the principals of the [`config::Config`]. Store calls run on tokio's blocking pool.
//!
//! It is not the policy engine (`assent-core`) or the store (`assent-store`); it owns the wire
//! format (JSON, RFC 3339 times) and authorisation, including the AAEP and MPLP events the
//! store writes: [`envelopes`] renders them ([`WireEnvelopes`], passed to `Store::open`).
//!
//! Layout, by the approval's life cycle (the same names as the store's): [`gate`] (propose),
//! [`approvals`] and [`decide`] (read, decide, cancel), [`tokens`] (redeem, grants), with
//! [`plans`], [`clarify`], [`aaep`], [`tools`], [`learning`], [`whoami`], [`reload`] (live
//! reload of principals, agents and policies) and the
//! [`dashboard`] beside them; [`router`](mod@router) is the only module that mounts routes. Below them a
//! kit nothing imports back: [`state`], [`extract`] (extractors), [`agent_json`] (an agent's body for itself), [`store_call`], [`executor`], [`calls`],
//! [`body`] (responses written from `assent-api` types), `wire` (core → api vocabulary),
//! [`envelopes`] (AAEP and MPLP events), [`edits`], [`replies`], [`waiters`], [`error`],
//! [`auth`], [`config`], [`throttle`], [`edge`], [`serve`]. This file only declares the modules and runs the server; no module
//! imports it.

#![warn(missing_docs)]

// Handlers, by step of the approval's life cycle (routes are mounted by `router` alone).
pub mod aaep;
mod aaep_streams;
pub mod approvals;
pub mod clarify;
pub mod decide;
pub mod diff;
pub mod gate;
pub mod insights;
pub mod jwks;
pub mod learning;
pub mod metrics;
pub mod openapi;
pub mod passkeys;
pub mod plans;
pub mod policies;
pub mod receipts;
pub mod reload;
pub mod results;
pub mod router;
pub mod scrape;
pub mod suggestions;
pub mod tokens;
pub mod tools;
pub mod whoami;
// The operator dashboard.
pub mod dashboard;
// Background work and the wire formats.
pub mod checkpoints;
mod cursor;
mod deliveries;
pub mod envelopes;
pub mod formats;
pub mod retention;
pub mod webhooks;
mod wire;
// The kit at the bottom: state, extractors, store calls, checks, errors, config, the edge.
pub mod agent_json;
pub mod auth;
pub mod body;
pub mod body_budget;
pub mod calls;
pub mod config;
pub mod edge;
pub mod edits;
pub mod error;
pub mod executor;
pub mod extension;
pub mod extract;
pub mod generations;
pub mod replicas;
pub mod replies;
pub mod serve;
mod serve_slots;
pub mod slack;
pub mod standing;
pub mod state;
pub mod store_call;
pub mod telemetry;
pub mod throttle;
pub mod waiters;

pub use envelopes::WireEnvelopes;
pub use state::{
    AppState, DEFAULT_MAX_ARGUMENTS_BYTES, DryRun, DryRunFuture, DryRunToolsFuture, Live, Settings,
    StartError, now_ms,
};

use assent_store::Store;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;

/// The application router (no listener), for tests with `tower::ServiceExt::oneshot`.
pub fn router(state: AppState) -> axum::Router {
    app(state, axum::Router::new())
}

/// The gateway's routes and `extra` (the MCP hub's `/mcp`) behind the same edge: the throttle
/// (rate limits, failed-authentication lock-outs), every body buffered within the body-read
/// timeout and the body limit, the URI limit, JSON errors and caught panics.
pub fn app(state: AppState, extra: axum::Router) -> axum::Router {
    let max_body = state
        .settings
        .max_arguments_bytes
        .saturating_add(edge::BODY_OVERHEAD_BYTES);
    let routes = router::routes(state.clone())
        .merge(extra)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            generations::refuse_superseded,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::buffer_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::throttle,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state,
            edge::forwarded_from_proxies,
        ))
        .layer(axum::middleware::from_fn(telemetry::trace_request));
    edge::wrap(routes, max_body)
}

/// Applies expiry now, then every `interval`, until the returned task is aborted.
pub fn spawn_expiry(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // A sweep failing every second (a database down, a replica's writes refused for its
        // clock) is logged as an error once, then until it recovers at debug level.
        let mut failing = false;
        // The countdowns and the questions' expiry are steps of their own: one failing (a row
        // edited out of range) stops neither the other nor the approvals' expiry (found by
        // review: it failed the whole sweep, every second), and is logged as the sweep is.
        let mut steps = [Step::new("countdowns"), Step::new("question expiry")];
        loop {
            let sweep = |s: &Store| -> Result<_, assent_store::StoreError> {
                let now = now_ms();
                let ids = s.expire_due(now)?;
                Ok((ids, [s.emit_countdowns(now), s.expire_clarifications(now)]))
            };
            // A superseded replica writes nothing (its store refuses): the newest replicas
            // sweep.
            if state.generation.superseded().is_some() {
                tokio::time::sleep(interval).await;
                continue;
            }
            let swept = state.store_task(sweep).await;
            let was_failing = std::mem::replace(&mut failing, matches!(swept, Ok(Err(_))));
            match swept {
                Ok(Ok((ids, done))) => {
                    let other: usize = steps.iter_mut().zip(done).map(|(s, d)| s.ran(d)).sum();
                    if was_failing {
                        tracing::info!("expiry sweep works again");
                    }
                    if !ids.is_empty() || other > 0 {
                        for id in &ids {
                            tracing::info!(approval_id = %id, "approval expired or escalated");
                        }
                        state.expired(ids);
                        state.changed();
                    }
                }
                Ok(Err(e)) if was_failing => tracing::debug!(error = %e, "expiry sweep failed"),
                Ok(Err(e)) => tracing::error!(error = %e, "expiry sweep failed"),
                Err(_) => {}
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// One step of the expiry sweep besides the approvals' expiry, logged as the sweep is: a
/// failure as an error once, then at debug level until it works again.
struct Step {
    name: &'static str,
    failing: bool,
}

impl Step {
    fn new(name: &'static str) -> Self {
        Step {
            name,
            failing: false,
        }
    }

    /// What the step did this time (`Ok`: how many events it emitted), logged; the count.
    fn ran(&mut self, done: Result<usize, assent_store::StoreError>) -> usize {
        let (name, was) = (self.name, self.failing);
        self.failing = done.is_err();
        match done {
            Ok(n) => {
                if was {
                    tracing::info!("expiry sweep: {name} works again");
                }
                n
            }
            Err(e) if was => {
                tracing::debug!(error = %e, "expiry sweep: {name} failed");
                0
            }
            Err(e) => {
                tracing::error!(error = %e, "expiry sweep: {name} failed");
                0
            }
        }
    }
}

/// Serves the API on `listener` until `shutdown` completes, then drains connections for at
/// most 10 seconds. Expired approvals (also those that expired while the server was down) are
/// settled at start and then every second; audit checkpoints are signed when due (checked every
/// second) and once more at shutdown.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_with(listener, None, state, axum::Router::new(), shutdown).await
}

/// A gateway serving [`run`] on an ephemeral loopback port (`127.0.0.1:0`) in this process:
/// for tests, benchmarks and embedding. [`Loopback::stop`] shuts it down as `run` does
/// (drain, last audit checkpoint); dropping it without stopping leaves the task running until
/// the runtime ends.
pub struct Loopback {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Loopback {
    /// Binds `127.0.0.1:0` and serves `state` on it. Errors: the bind's.
    pub async fn start(state: AppState) -> std::io::Result<Loopback> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, state, async move {
            let _ = rx.await;
        }));
        Ok(Loopback {
            url,
            stop: Some(stop),
            task,
        })
    }

    /// Stops serving and waits for the server task (connections drained, the last audit
    /// checkpoint signed). Errors: the server's I/O error, or the task's panic as an I/O error.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.map_err(std::io::Error::other)?
    }
}

/// [`run`], with `extra` routes merged into the API (the MCP hub's `/mcp`) and, with
/// `private`, served on that Unix socket too (the hub's way to this gateway,
/// [`serve::serve`]).
pub async fn run_with(
    listener: TcpListener,
    private: Option<serve::Private>,
    state: AppState,
    extra: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Before anything is withdrawn: a replica with an older configuration than another put in
    // force stops here (found by review: its sweeps withdrew what the newer one stood behind).
    // A reload (a SIGHUP during start-up is kept for now) waits until the configuration is
    // registered and the sweeps ran under it (found by review: one swapped the configuration
    // while the older one's digest was being recorded).
    let reloads = match &state.reload {
        Some(r) => Some(r.lock.lock().await),
        None => None,
    };
    generations::register_at_start(&state).await?;
    generations::record_loaded(&state).await?;
    close_orphan_subscriptions(&state).await;
    withdraw_orphan_votes(&state).await?;
    revoke_orphan_grants(&state).await?;
    drop(reloads);
    state.refresh_extension().await;
    let expiry = spawn_expiry(state.clone(), Duration::from_secs(1));
    let generation = generations::watch(state.clone());
    let streams = aaep_streams::keep(state.clone());
    let holder = assent_store::random_id("replica_");
    // A state served again after a stop delivers again.
    state.stopping.send_replace(false);
    let hooks = webhooks::spawn(state.clone(), &holder).await;
    let signer = checkpoints::spawn(state.clone(), Duration::from_secs(1));
    let limits = state.limits.clone();
    let app = app(state.clone(), extra);
    // The deliveries wind down while the connections drain, not after (`webhooks::stop`).
    let stopping = state.stopping.clone();
    let shutdown = async move {
        shutdown.await;
        stopping.send_replace(true);
    };
    let res = serve::serve(
        listener,
        private,
        app,
        limits,
        Duration::from_secs(10),
        shutdown,
    )
    .await;
    expiry.abort();
    generation.abort();
    streams.abort();
    signer.stop().await;
    webhooks::stop(&state, hooks).await;
    webhooks::release(&state, &holder).await;
    // A reload under way (run apart from its request) ends before the replica leaves, and none
    // starts after (found by review: one could record its configuration, or be cut off
    // between its audit record and the swap, as the process went down).
    let _no_reload = match &state.reload {
        Some(r) => Some(r.lock.lock().await),
        None => None,
    };
    generations::leave(&state).await;
    // The last checkpoint covers everything written before the shutdown.
    checkpoints::sign_due(&state, assent_store::checkpoint::Due::NOW).await;
    res
}

/// Closes the AAEP subscriptions of principals that are no operator in this configuration
/// (removed from the file before a restart), so that no timeout extension of theirs lengthens
/// a new confirmation; logged, and a store error only logged (the gateway starts).
async fn close_orphan_subscriptions(state: &AppState) {
    let operators: Vec<String> = state
        .principals()
        .iter()
        .filter(|p| p.roles().is_some())
        .map(|p| p.name.clone())
        .collect();
    let closed = state
        .store_task(move |s| {
            s.close_subscriptions_except(&operators, "system:start-up", state::now_ms())
        })
        .await;
    match closed {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(
            closed = n,
            "AAEP subscriptions of operators no longer configured closed"
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "AAEP subscriptions of removed operators were not closed")
        }
        Err(_) => tracing::warn!("AAEP subscriptions of removed operators were not closed"),
    }
}

/// Withdraws the votes on pending approvals that the configuration no longer stands behind
/// ([`assent_store::Store::withdraw_votes`], each checked by [`standing::vote_stands`]): their
/// voter is no operator of it (removed or renamed in the file before a restart), no longer
/// holds a role they voted with (from the file, or for a single sign-on from the groups it
/// was cast with under the `oidc.roles` map in force), or voted with a key that is not
/// theirs any more (rotated by the restart). Then voids, by the same rule, the unredeemed
/// tokens of approvals whose consent rested on such a decision or needed vote
/// ([`assent_store::Store::void_unbacked_tokens`], `token.voided`), as a reload removing or
/// changing the operator does: found by review, removing a stolen key from the file and
/// restarting left the tokens of the calls it had approved redeemable. A single decision
/// keeps the binding of the key (or channel) it was made with (migration 0052) and is weighed
/// as a vote is, with no roles: it falls when its decider is no operator of the configuration
/// or that key is not theirs any more (found by review: a key rotated under the same name
/// left what the stolen key approved redeemable); one made before that migration keeps none
/// and falls only with its decider. A call a grant let through is weighed by the grant's maker
/// and the binding it keeps; one the agent's user approved in the client stands while the
/// agent is configured ([`standing::in_client_user_stands`]). A store error stops start-up
/// (fail closed: the vote would count, the token redeem).
async fn withdraw_orphan_votes(state: &AppState) -> std::io::Result<()> {
    let live = state.principals();
    let oidc = state.oidc.clone();
    let withdrawn = state
        .store_task(move |s| {
            let oidc = oidc.as_ref().map(|o| &o.config);
            let stands = |voter: &str, roles: &[String], key: Option<&str>| {
                standing::vote_stands(&live, oidc, (voter, roles, key))
            };
            let why = "the configuration no longer has the voter as an operator with the roles they voted with";
            let now = state::now_ms();
            let n = s.withdraw_votes(stands, "system:start-up", why, now)?;
            // An agent's user's decision in the client rests on no operator: it stands while
            // the agent is configured.
            let consent = |p: &str, roles: &[String], key: Option<&str>| {
                stands(p, roles, key) || standing::in_client_user_stands(&live, (p, key))
            };
            let why = "the configuration no longer has the operator who approved it (or cast a vote it needed) as an operator with that key and roles";
            let voided = s.void_unbacked_tokens(&consent, "system:start-up", why, now)?;
            Ok::<_, assent_store::StoreError>((n, voided))
        })
        .await;
    match withdrawn {
        Ok(Ok((0, 0))) => Ok(()),
        Ok(Ok((n, voided))) => {
            tracing::info!(
                withdrawn = n,
                voided,
                "votes of operators no longer configured withdrawn, tokens they approved voided"
            );
            Ok(())
        }
        Ok(Err(e)) => Err(std::io::Error::other(format!(
            "the votes of operators no longer configured could not be withdrawn: {e}"
        ))),
        Err(_) => Err(std::io::Error::other(
            "the votes of operators no longer configured could not be withdrawn",
        )),
    }
}

/// Revokes the active grants that the configuration no longer stands behind
/// ([`assent_store::Store::revoke_grants_unless`], each weighed by
/// [`assent_core::grant_standing::grant_stands`] with [`grant_decider_now`]): their maker is
/// no operator of it (removed or renamed in the file before a restart, or now an agent), no
/// longer holds any role that may decide the approval the grant came from, or made it with a
/// key (or Slack account, or single sign-on identity) that is not theirs any more: the grant
/// keeps that binding (migration 0048) and it is checked as a quorum vote's is
/// ([`standing::vote_stands`]). A grant whose approval is gone or damaged covers nothing and is
/// revoked too. Audited `grant.revoked` (actor `system:start-up`), with a reason of its own
/// for a rotated key. A store error stops start-up (fail closed: the grant would keep letting
/// calls through). Found by review: a stolen key's `workspace` grants outlived its removal
/// from the file, and its rotation (same name and roles, a new key) by a restart.
async fn revoke_orphan_grants(state: &AppState) -> std::io::Result<()> {
    use assent_core::grant_standing::{Decider, grant_stands};
    let live = state.principals();
    let oidc = state.oidc.clone();
    let revoked = state
        .store_task(move |s| {
            let oidc = oidc.as_ref().map(|o| &o.config);
            let decider = |g: &assent_store::grants_revoke::GrantOrigin| {
                grant_decider_now(&live, oidc, g)
            };
            let now = state::now_ms();
            let rebound = |g: &assent_store::grants_revoke::GrantOrigin| {
                decider(g) != Decider::Rebound
            };
            let why = "the grant was made with a key (or channel) that is no longer its maker's: the key was rotated";
            let mut n = s.revoke_grants_unless(rebound, "system:start-up", why, now)?;
            let stands = |g: &assent_store::grants_revoke::GrantOrigin| {
                let Some(a) = g.approvers.as_deref() else {
                    return false;
                };
                match g.key_binding.as_deref() {
                    // Made signed in by single sign-on: its maker's roles are those the groups
                    // it keeps map to now, not the file's (found by review: a linked
                    // operator's grant was judged by the file's roles, and revoked at every
                    // restart). Its maker must still be one (R10: a removed operator's grant
                    // on an any-operator approval stood), its identity still theirs.
                    Some(k) if k.starts_with(standing::SSO_VOTE) => {
                        let by = (g.created_by.as_str(), k);
                        let maker = matches!(decider(g), Decider::Operator(_) | Decider::UnlinkedSso);
                        let roles: Vec<&[String]> = match a {
                            [] => vec![&[]],
                            some => some.iter().map(std::slice::from_ref).collect(),
                        };
                        maker && roles.iter().any(|r| sso_roles_stand(&live, oidc, by, r))
                    }
                    _ => grant_stands(decider(g), a),
                }
            };
            let why = "the configuration no longer has the operator who made it as one who may decide its approval";
            n += s.revoke_grants_unless(stands, "system:start-up", why, now)?;
            Ok::<_, assent_store::StoreError>(n)
        })
        .await;
    let failed = "the grants of operators no longer configured could not be revoked";
    match revoked {
        Ok(Ok(0)) => Ok(()),
        Ok(Ok(n)) => {
            tracing::info!(
                revoked = n,
                "grants of operators no longer configured, or made with a rotated key, revoked"
            );
            Ok(())
        }
        Ok(Err(e)) => Err(std::io::Error::other(format!("{failed}: {e}"))),
        Err(_) => Err(std::io::Error::other(failed)),
    }
}

/// Whether the single sign-on identity and groups that binding `key` keeps (a grant made from
/// a signed-in session, by `by`) are still `by`'s and still give every role of `roles` (none:
/// the identity alone) under the principals `live` and the `oidc` map in force, as a quorum
/// vote's are held ([`standing::vote_stands`]).
fn sso_roles_stand(
    live: &[config::Principal],
    oidc: Option<&config::oidc::OidcConfig>,
    (by, key): (&str, &str),
    roles: &[String],
) -> bool {
    standing::vote_stands(live, oidc, (by, roles, Some(key)))
}

/// What the principals `live` and the single sign-on configuration `oidc` in force make of the
/// maker of grant `g` ([`reload::decider_now`]), or [`Decider::Rebound`] when they still have
/// the maker as an operator (or an unlinked `oidc:` name) but what the grant was made with —
/// the key binding, Slack account or single sign-on identity it keeps — is not theirs now:
/// the same check a quorum vote's binding gets at start-up ([`standing::vote_stands`], here with
/// no roles: [`assent_core::grant_standing::grant_stands`] weighs those). A grant made before
/// migration 0048 keeps no binding and is weighed by its maker's name and roles alone, as a
/// vote cast before migration 0038 is.
///
/// [`Decider::Rebound`]: assent_core::grant_standing::Decider::Rebound
fn grant_decider_now<'a>(
    live: &'a [config::Principal],
    oidc: Option<&config::oidc::OidcConfig>,
    g: &assent_store::grants_revoke::GrantOrigin,
) -> assent_core::grant_standing::Decider<'a> {
    use assent_core::grant_standing::Decider;
    let by = g.created_by.as_str();
    match reload::decider_now(live, oidc.is_some(), by) {
        Decider::Operator(_) | Decider::UnlinkedSso
            if !standing::vote_stands(live, oidc, (by, &[], g.key_binding.as_deref())) =>
        {
            Decider::Rebound
        }
        d => d,
    }
}
