//! Configuration generations across the replicas of one PostgreSQL database (issue 13 §2):
//! a replica whose principals, agents and policies are older than those another replica put
//! in force serves nothing and withdraws nothing. Found by review: a replica restarted with an
//! older file withdrew, in the shared database, the votes, grants and tokens of operators a
//! newer configuration had added (its start-up sweeps weighed them against its own file), and
//! went on taking the decisions of operators the newer one had removed and enforcing the
//! policies it had relaxed or tightened.
//!
//! The configuration's [`digest`] is registered at start-up ([`register_at_start`]: an older
//! one stops start-up unless `serve --adopt-config`), by a reload that changes it (always
//! adopted: the operator's deliberate act), and checked every [`CHECK_EVERY`] ([`watch`]). While
//! superseded, every request but the health checks, metrics, keys and `POST /v1/reload` is
//! `503 CONFIG_SUPERSEDED` ([`refuse_superseded`]) and `/readyz` is `503 config_superseded`.
//! SQLite has one process, so none of this applies there (a restart with an earlier file is
//! the configuration there is).

use crate::error::ApiError;
use crate::state::{AppState, Live, now_ms};
use assent_store::config_generations::{ConfigStanding, Superseded};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::Duration;

/// How often a running replica checks that its configuration is still the newest.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// SHA-256 (lowercase hex) of the consent-relevant part of configuration `live`: the policy
/// set's digest (every agent and governance file's text) and each principal's name, kind,
/// roles or agent, key digest, owned agents, single sign-on identity and Slack account, in
/// name order. Settings that differ between replicas by design (`listen`, `data_dir`) are
/// left out, so replicas of one configuration agree.
pub fn digest(live: &Live) -> String {
    use crate::config::PrincipalKind;
    let mut principals: Vec<_> = live
        .principals
        .iter()
        .map(|p| {
            let kind = match &p.kind {
                PrincipalKind::Operator { roles } => json!({"operator": roles}),
                PrincipalKind::Agent { agent_id } => json!({"agent": agent_id}),
                PrincipalKind::Executor {
                    agents,
                    servers,
                    tools,
                } => json!({"executor": [agents, servers, tools]}),
            };
            json!([
                p.name,
                kind,
                hex::encode(p.key_sha256),
                p.owns,
                p.sso,
                p.slack_user_id
            ])
        })
        .collect();
    principals.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
    let all = json!({"policy_set": live.registry.policy_set_sha256, "principals": principals});
    let text = assent_core::canonical::canonical_value(&all).unwrap_or_else(|_| all.to_string());
    assent_core::canonical::sha256_hex(text.as_bytes())
}

/// How this process names itself in `loaded_by`: host name and process id.
fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown host".into());
    format!("{host} (pid {})", std::process::id())
}

/// The sentence naming the newer configuration `s` that supersedes this one.
fn why(s: &Superseded) -> String {
    let at = assent_core::stamp::rfc3339(s.loaded_at);
    format!(
        "this replica's configuration (principals, agents and policies) is generation {}, but {} loaded generation {} at {at}: a replica with an older configuration serves nothing and withdraws nothing. Give it the newest configuration and reload it (SIGHUP or POST /v1/reload), or restart it with --adopt-config to make its configuration the newest (the other replicas then stop serving until they load it)",
        s.generation, s.loaded_by, s.newest
    )
}

/// Registers `digest` (with `adopt`) and records the answer in the state: `Err(why)` when
/// superseded. Store errors are `Err` too, with what failed.
async fn register(st: &AppState, digest: String, adopt: bool) -> Result<i64, String> {
    let by = replica_name();
    let d = digest.clone();
    let got = st
        .store_task(move |s| s.register_config(&d, &by, adopt, now_ms()))
        .await;
    match got {
        Ok(Ok(ConfigStanding::Newest { generation })) => {
            st.generation.set(&digest, None);
            Ok(generation)
        }
        Ok(Ok(ConfigStanding::Superseded(s))) => {
            let why = why(&s);
            st.generation.set(&digest, Some(why.clone()));
            Err(why)
        }
        Ok(Ok(ConfigStanding::Unknown)) => Err("the configuration was not registered".into()),
        Ok(Err(e)) => Err(format!(
            "the configuration generation could not be recorded: {e}"
        )),
        Err(e) => Err(format!(
            "the configuration generation could not be recorded: {e:?}"
        )),
    }
}

/// At start-up, before anything is withdrawn: registers this replica's configuration, adopting
/// it with `serve --adopt-config`. Errors (stopping start-up): a newer configuration was loaded
/// by another replica (the message says which and what to do), or the store failed.
pub(crate) async fn register_at_start(st: &AppState) -> std::io::Result<()> {
    if !st.generation.enforced() {
        return Ok(());
    }
    let adopt = st.generation.adopting();
    let generation = register(st, digest(&st.live()), adopt)
        .await
        .map_err(std::io::Error::other)?;
    tracing::info!(generation, adopted = adopt, "configuration generation");
    Ok(())
}

/// After a reload put `live` in force: a changed configuration becomes the newest generation
/// (a reload is the operator's deliberate act, so an earlier configuration is adopted again);
/// an unchanged one is left as it stands (a superseded replica reloading the same older file
/// stays superseded). A store failure is logged; [`watch`] tries again.
pub(crate) async fn reloaded(st: &AppState, live: &Live) {
    if !st.generation.enforced() {
        return;
    }
    let new = digest(live);
    if new == st.generation.digest() {
        return;
    }
    match register(st, new, true).await {
        Ok(generation) => tracing::info!(generation, "reloaded configuration is the newest"),
        Err(why) => tracing::warn!(%why, "reloaded configuration's generation not recorded"),
    }
}

/// Checks every [`CHECK_EVERY`] that this replica's configuration is still the newest (one read
/// beside the writer), logging when it stops or starts being so; a digest the database no
/// longer knows (its table emptied or restored) is registered again. Until aborted.
pub(crate) fn watch(st: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if !st.generation.enforced() {
            return;
        }
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            let digest = st.generation.digest();
            if digest.is_empty() {
                continue;
            }
            let d = digest.clone();
            let before = st.generation.superseded();
            let now = match st.store_call_apart(move |s| s.config_standing(&d)).await {
                Ok(ConfigStanding::Newest { .. }) => None,
                Ok(ConfigStanding::Superseded(s)) => Some(why(&s)),
                Ok(ConfigStanding::Unknown) => register(&st, digest.clone(), false).await.err(),
                Err(e) => {
                    tracing::warn!(error = ?e, "configuration generation not checked");
                    continue;
                }
            };
            match (&before, &now) {
                (None, Some(why)) => tracing::error!(%why, "configuration superseded"),
                (Some(_), None) => tracing::info!("configuration is the newest again"),
                _ => {}
            }
            st.generation.set(&digest, now);
        }
    })
}

/// Whether `path` is served while superseded: the health checks, metrics, the keys and
/// `POST /v1/reload` (the way to load the newest configuration).
fn served_while_superseded(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/metrics" | "/v1/reload" | "/v1/keys" | "/.well-known/jwks.json"
    )
}

/// Middleware: while this replica's configuration is superseded, `503 CONFIG_SUPERSEDED`
/// (with the reason) for every request but [`served_while_superseded`] ones.
pub(crate) async fn refuse_superseded(
    State(st): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if served_while_superseded(req.uri().path()) {
        return next.run(req).await;
    }
    match st.generation.superseded() {
        None => next.run(req).await,
        Some(why) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            assent_api::error::CONFIG_SUPERSEDED,
            why,
        )
        .into_response(),
    }
}
