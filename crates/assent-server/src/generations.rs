//! Configuration generations across the replicas of one PostgreSQL database (issue 13 §2):
//! a replica whose principals, agents and policies are older than those another replica put
//! in force serves nothing and withdraws nothing. Found by review: a replica restarted with an
//! older file withdrew, in the shared database, the votes, grants and tokens of operators a
//! newer configuration had added (its start-up sweeps weighed them against its own file), and
//! went on taking the decisions of operators the newer one had removed and enforcing the
//! policies it had relaxed or tightened.
//!
//! The configuration's [`digest`] is registered at start-up, before anything is withdrawn
//! ([`register_at_start`]: refused while another live replica serves another configuration,
//! unless `serve --adopt-config`), by a reload that changes it, before anything is withdrawn
//! (always adopted: the operator's deliberate act; a failure refuses the reload), and renewed
//! every [`CHECK_EVERY`] ([`watch`], which also says the replica is live; a graceful stop says
//! it no longer is, [`leave`]). While superseded, every request but the health checks,
//! metrics, keys and `POST /v1/reload` is `503 CONFIG_SUPERSEDED` ([`refuse_superseded`]) and
//! `/readyz` is `503 config_superseded`; the answers name no host (they need no key), the log
//! does. SQLite has one process, so none of this applies there.

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

/// `v2:` and the SHA-256 (lowercase hex) of the consent-relevant part of configuration `live`, the
/// single sign-on settings `oidc` and the restart-only `settings`
/// ([`crate::config::consent_settings`]: token, grant and approval lifetimes, bounds, audit
/// retention, passkeys, Slack's workspace): the policy set's digest (every agent and governance
/// file's text, byte for byte: replicas must have the same files), each principal's name, kind,
/// roles or agent, key digest, owned agents, single sign-on identity and Slack account, in name
/// order, the provider, claims and role map, and `settings` as given. Settings that differ between
/// replicas by design (`listen`, `data_dir`, connection and rate limits, webhooks, MCP upstreams)
/// are left out, so replicas of one configuration agree. (`v1:` digests, of earlier builds, left
/// the settings out.)
pub fn digest(
    live: &Live,
    oidc: Option<&crate::config::oidc::OidcConfig>,
    settings: &str,
) -> String {
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
    // The single sign-on settings that decide whose votes and grants stand (the start-up
    // sweeps weigh them too): the provider, the claims and the role map.
    let sso = oidc.map(|o| json!([o.issuer, o.name_claim, o.roles_claim, o.roles]));
    let all = json!({"policy_set": live.registry.policy_set_sha256, "principals": principals,
        "sso": sso, "settings": settings});
    let text = assent_core::canonical::canonical_value(&all).unwrap_or_else(|_| all.to_string());
    format!("v2:{}", assent_core::canonical::sha256_hex(text.as_bytes()))
}

/// The digest of the configuration `st` has in force now ([`digest`]): `live` with the
/// single sign-on and restart-only settings it was started with.
pub(crate) fn digest_of(st: &AppState, live: &Live) -> String {
    let oidc = st.oidc.as_ref().map(|o| &o.config);
    digest(live, oidc, st.generation.settings())
}

/// How this process names itself to the other replicas: host name, process id and a random
/// part, fixed for the process.
/// A random part makes it unique (found by review: two containers with one host name, each
/// pid 1, were one replica to each other, so the check passed them by).
fn replica_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown host".into());
        let id = assent_store::random_id("");
        format!(
            "{host} (pid {}, {})",
            std::process::id(),
            &id[..8.min(id.len())]
        )
    })
    .clone()
}

/// The sentence, for the wire (no host named), saying a newer configuration `s` supersedes
/// this one.
fn why(s: &Superseded) -> String {
    format!(
        "another replica put a newer configuration (principals, agents, policies, single sign-on or restart-only settings) in force, generation {}, than this replica's, generation {}: it serves nothing and withdraws nothing until it is reloaded (SIGHUP or POST /v1/reload) with the newest, or restarted with it when the newest differs in a setting only a restart applies (token_ttl_seconds, session_grant_max_seconds, approval_timeout_seconds, aaep_max_timeout_extension_seconds, max_pending_per_agent, max_arguments_bytes, audit_retention_days, passkeys, slack.team_id)",
        s.newest, s.generation
    )
}

/// Puts `digest` in force for this replica's requests ([`crate::state::Generation`], with why
/// it is `superseded`) and for its store's writes ([`assent_store::Store::serve_config`]: each
/// write checks, in its transaction, that it is still the newest, so a replica superseded
/// between two [`watch`] checks writes nothing under it).
fn serve(st: &AppState, digest: &str, superseded: Option<String>) {
    st.generation.set(digest, superseded);
    st.store.serve_config(Some(&[digest]));
}

/// `Ok` when an operator's reload may put `new` in force in place of `current`: `current` is
/// the newest generation as the database says now (not as the watch last saw it, up to 2 s
/// before: found by review), or, if another replica superseded it (`why`, the watch's
/// reason, when it saw), `new` is that newest one: the replica catches up. Refused otherwise:
/// an operator's reload here is authenticated by the older principals this replica still has,
/// and adopting its file would supersede the newer configuration (found by review: an
/// operator the newer file removed reloaded a replica whose file still listed them, and
/// their key worked again on every replica). When the database lost this replica's record
/// ([`REREGISTER_FAILED`]) and knows no newer one, the file is put in force. Adopting on
/// purpose takes the host: SIGHUP, or `serve --adopt-config`.
async fn catching_up(
    st: &AppState,
    (current, new): (&str, &str),
    why: Option<&str>,
) -> Result<(), NotReloaded> {
    let (c, n) = (current.to_string(), new.to_string());
    let standing = st
        .store_task(move |s| {
            Ok::<_, assent_store::StoreError>((s.config_standing(&c)?, s.config_standing(&n)?))
        })
        .await
        .map_err(|e| NotReloaded::Store(e.message))?
        .map_err(|e| NotReloaded::Store(e.to_string()))?;
    let lost = why == Some(REREGISTER_FAILED);
    match standing {
        (ConfigStanding::Newest { .. }, _) | (_, ConfigStanding::Newest { .. }) => Ok(()),
        (ConfigStanding::Unknown, ConfigStanding::Unknown) if lost => Ok(()),
        _ => Err(NotReloaded::Superseded(format!(
            "{}; an operator's reload of this replica may only load that configuration, and its file is another (to put this file in force on purpose, send the replica SIGHUP or restart it with --adopt-config)",
            why.unwrap_or("another replica put a newer configuration in force")
        ))),
    }
}

/// Registers `digest` (with `adopt`) as the newest generation; the caller puts it in force.
/// Errors: refused (another live replica serves another configuration: the sentence names it,
/// for the operator) or the store failed.
async fn register(st: &AppState, digest: &str, adopt: bool) -> Result<i64, String> {
    let by = replica_name();
    let d = digest.to_string();
    let not_recorded =
        |e: String| format!("the configuration generation could not be recorded: {e}");
    let g = st.generation.clone();
    let got = st
        .store_task(move |s| (!g.has_left()).then(|| s.register_config(&d, &by, adopt, now_ms())))
        .await
        .map_err(|e| not_recorded(e.message))?
        .ok_or_else(|| not_recorded("this replica is stopping".into()))?
        .map_err(|e| not_recorded(e.to_string()))?;
    match got {
        ConfigStanding::Newest { generation } => Ok(generation),
        ConfigStanding::Refused(holder, ago) => Err(format!(
            "{holder}, a replica seen {ago} ms ago, serves another configuration (principals, agents, policies, single sign-on or restart-only settings such as token_ttl_seconds) than this one: starting with it would withdraw what that configuration stands behind. Give this replica the same configuration, or, to put this one in force on purpose (the others then stop serving until they load it), start it with --adopt-config"
        )),
        other => Err(not_recorded(format!("it stands as {other:?}"))),
    }
}

/// At start-up, before anything is withdrawn (the store writes nothing until then: the state
/// set it to refuse every write): registers this replica's configuration, adopting it with
/// `serve --adopt-config`, and puts it in force. Errors (stopping start-up): another live
/// replica serves another configuration (the message names it and says what to do), or the
/// store failed.
pub(crate) async fn register_at_start(st: &AppState) -> std::io::Result<()> {
    if !st.generation.enforced() {
        return Ok(());
    }
    let adopt = st.generation.adopting();
    let digest = digest_of(st, &st.live());
    let generation = register(st, &digest, adopt)
        .await
        .map_err(std::io::Error::other)?;
    serve(st, &digest, None);
    tracing::info!(generation, adopted = adopt, "configuration generation");
    Ok(())
}

/// At start-up, once the configuration is registered: records `config.loaded` (actor
/// `system:start`) when the configuration in force (its policy set and its digest: principals,
/// agents, policies, sign-on, restart-only settings) is not the one the audit chain recorded
/// last ([`assent_store::Store::record_config_loaded`]), with how many agents, policies and
/// principals it has and this replica's name, and logs a warning when it changed. Found by
/// review: a restart with other files changed the rules in force, or who may approve, with no
/// trace in the audit chain (a reload was recorded). Errors (stopping start-up): the store
/// failed, so a change could not be recorded.
pub(crate) async fn record_loaded(st: &AppState) -> std::io::Result<()> {
    let live = st.live();
    let reg = &live.registry;
    let data = json!({"policy_set_sha256": reg.policy_set_sha256,
        "agents": reg.agents.len(), "policies": reg.policies().len(),
        "principals": live.principals.len(), "config_digest": digest_of(st, &live),
        "replica": replica_name()});
    let recorded = st
        .store_task(move |s| s.record_config_loaded(data, "system:start", now_ms()))
        .await
        .map_err(|e| std::io::Error::other(e.message))?
        .map_err(|e| std::io::Error::other(format!("config.loaded was not recorded: {e}")))?;
    if let Some(d) = recorded.filter(|d| d["changed"] == true) {
        tracing::warn!(policy_set_sha256 = %reg.policy_set_sha256,
            previous_policy_set_sha256 = %d["previous_policy_set_sha256"],
            "the configuration in force is not the one the audit chain recorded last: files changed while the gateway was stopped (recorded as config.loaded)");
    }
    Ok(())
}

/// Why [`reloading`] refused a reload.
#[derive(Debug)]
pub(crate) enum NotReloaded {
    /// The store failed, or start-up has not registered the configuration yet.
    Store(String),
    /// This replica is superseded and the reloaded configuration is the one in force.
    Superseded(String),
}

/// Before a reload puts `live` in force (and before it withdraws anything): a changed
/// configuration becomes the newest generation (a reload is the operator's deliberate act, so
/// an earlier configuration is adopted again) and the store writes under it (and, while it
/// is being recorded, under the one in force too, unless that one is superseded, so that the
/// writes queued meanwhile are not refused: found by review); the requests stay refused if
/// this replica was superseded, until the reload puts it in force ([`Recorded::in_force`];
/// the watch leaves that alone meanwhile: found by review, they were served under the older
/// principals and policies). Returns the guard of the switch ([`Recorded`], armed before
/// anything is recorded). Errors (the reload is refused, nothing is put in force): the store
/// failed; an unchanged configuration while this replica is superseded (it stays so: the
/// message says what to do); start-up has not registered its configuration yet.
pub(crate) async fn reloading<'a>(
    st: &'a AppState,
    live: &Live,
    by_operator: bool,
) -> Result<Recorded<'a>, NotReloaded> {
    let unchanged = Recorded { st, switch: None };
    if !st.generation.enforced() {
        return Ok(unchanged);
    }
    let current = st.generation.digest();
    if current.is_empty() {
        let why = "the gateway is starting: its configuration is not registered yet";
        return Err(NotReloaded::Store(why.into()));
    }
    let new = digest_of(st, live);
    let superseded = st.generation.superseded();
    if new == current {
        return match superseded {
            Some(why) => Err(NotReloaded::Superseded(format!(
                "the reloaded configuration is the one in force: {why} (to put this one in force on purpose, restart the replica with --adopt-config)"
            ))),
            None => Ok(unchanged),
        };
    }
    // Superseded because the database lost this replica's record, no newer one is known.
    if by_operator {
        catching_up(st, (&current, &new), superseded.as_deref()).await?;
    }
    // Armed from here: a reload cancelled while its configuration is being recorded leaves
    // the replica superseded and its store writing under the configuration in force alone
    // (found by review: it kept accepting both for good).
    st.generation.pend(true);
    let recorded = Recorded {
        st,
        switch: Some((current.clone(), new.clone())),
    };
    match superseded {
        None => st.store.serve_config(Some(&[&current, &new])),
        Some(_) => st.store.serve_config(Some(&[&new])),
    }
    let generation = match register(st, &new, true).await {
        Ok(generation) => generation,
        Err(e) => {
            // Not recorded (or, if its commit's answer was lost, recorded: then the one in
            // force is superseded, its writes refused, and the watch says so).
            recorded.disarm(&current);
            return Err(NotReloaded::Store(e));
        }
    };
    st.store.serve_config(Some(&[&new]));
    st.generation.set(&new, superseded);
    tracing::info!(generation, "reloaded configuration is the newest");
    Ok(recorded)
}

/// Returns once start-up registered this replica's configuration (at once when generations
/// are not enforced): a reload waits for it, without holding the reload lock start-up takes.
pub(crate) async fn registered(st: &AppState) {
    while st.generation.enforced() && st.generation.digest().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A reload switching configurations ([`reloading`]), until it puts the new one in force
/// ([`Recorded::in_force`]): dropped before that — the reload failed, or its request was
/// cancelled (a client gone, the drain's end), also while its configuration was being
/// recorded — the configuration still in force (the first of `switch`) may no longer be the
/// newest, so this replica serves nothing and its store writes under that one alone until a
/// reload succeeds or the watch finds it still the newest (fail closed; found by review: a
/// cancelled reload left the replica claiming the newest while serving the old).
pub(crate) struct Recorded<'a> {
    st: &'a AppState,
    switch: Option<(String, String)>,
}

impl Recorded<'_> {
    /// The switch failed where nothing of it was put in force: the store writes under
    /// `current` alone again, the requests stand as they did.
    fn disarm(mut self, current: &str) {
        self.switch = None;
        self.st.store.serve_config(Some(&[current]));
        self.st.generation.pend(false);
    }

    /// The reload put its configuration in force: its requests are served.
    pub(crate) fn in_force(mut self) {
        if let Some((_, new)) = self.switch.take() {
            self.st.generation.set(&new, None);
            self.st.generation.pend(false);
        }
    }
}

impl Drop for Recorded<'_> {
    fn drop(&mut self) {
        if let Some((previous, _)) = self.switch.take() {
            let why = "a reload recorded a newer configuration but did not put it in force: reload this replica again";
            serve(self.st, &previous, Some(why.to_string()));
            self.st.generation.pend(false);
        }
    }
}

/// At a graceful stop: this replica no longer counts as live for the others' start-up
/// ([`register_at_start`]). A store failure is logged (its liveness lapses in 10 s).
pub(crate) async fn leave(st: &AppState) {
    if !st.generation.enforced() {
        return;
    }
    let by = replica_name();
    // Marked off the executor (a heartbeat holding the mark may wait for its batch), then
    // withdrawn: no liveness write lands after the withdrawal.
    let g = st.generation.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || g.mark_left()).await {
        tracing::warn!(error = %e, "this replica's leave was not marked");
    }
    let left = st.store_task(move |s| s.leave_config(&by)).await;
    let failed = match left {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.message,
    };
    tracing::warn!(error = %failed, "this replica's liveness was not withdrawn");
}

/// Every [`CHECK_EVERY`]: says this replica serves its configuration (its liveness) and checks
/// it is still the newest, logging when it stops or starts being so; a digest the database no
/// longer knows (its table emptied or restored) is registered again. A check that a reload
/// overtook changes nothing. Until aborted.
pub(crate) fn watch(st: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if !st.generation.enforced() {
            return;
        }
        let by = replica_name();
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            let digest = st.generation.digest();
            if digest.is_empty() {
                continue;
            }
            let (d, b) = (digest.clone(), by.clone());
            let before = st.generation.superseded();
            let g = st.generation.clone();
            let got = st
                .store_apart(move |s| g.unless_left(|| s.config_heartbeat(&d, &b, now_ms())))
                .await;
            let now = match got {
                Ok(None) => return,
                Ok(Some(Ok(ConfigStanding::Superseded(s)))) => {
                    tracing::warn!(newest = s.newest, loaded_by = %s.loaded_by, "a newer configuration is in force");
                    Some(why(&s))
                }
                Ok(Some(Ok(ConfigStanding::Unknown))) => register_again(&st, &digest).await,
                Ok(Some(Ok(_))) => None,
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "configuration generation not checked");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = ?e, "configuration generation not checked");
                    continue;
                }
            };
            if !st.generation.set_if(&digest, now.clone()) {
                continue;
            }
            match (&before, &now) {
                (None, Some(why)) => tracing::error!(%why, "configuration superseded"),
                (Some(_), None) => tracing::info!("configuration is the newest again"),
                _ => {}
            }
        }
    })
}

/// The watch found `digest` unknown to the database (its table emptied or restored): registers
/// it again, holding the reload lock so that no reload puts another configuration in force
/// meanwhile (found by review: a reload that overtook the check had its digest replaced by
/// the older one). `None` when registered, or when a reload changed the configuration first;
/// else why it is superseded.
async fn register_again(st: &AppState, digest: &str) -> Option<String> {
    let _reloads = match &st.reload {
        Some(r) => Some(r.lock.lock().await),
        None => None,
    };
    if st.generation.digest() != digest {
        return None;
    }
    match register(st, digest, true).await {
        Ok(_) => {
            serve(st, digest, None);
            None
        }
        // The reason is answered to callers without a key (`/readyz`, every `503`): the
        // database's own error text (which can name its host) goes to the log only. Found by
        // review: it was published as the reason.
        Err(e) => {
            tracing::warn!(error = %e, "the configuration could not be registered again");
            Some(REREGISTER_FAILED.to_string())
        }
    }
}

/// Why a replica is superseded when its configuration, unknown to the database, could not be
/// registered again ([`register_again`]; the log says why).
const REREGISTER_FAILED: &str = "this replica's configuration is no longer recorded in the database and could not be recorded again (the replica's log says why): reload it (POST /v1/reload) or restart it";

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
