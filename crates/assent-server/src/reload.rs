//! Live reload (issue 14 §8): `POST /v1/reload` (an operator's key) and SIGHUP re-read the
//! configuration file the server was started with and put its principals, agents and
//! governance policies in force without a restart. Everything is validated first, with the
//! checks start-up makes (file, line, reason); a file that fails keeps the old set in force
//! and the errors are answered (`422 CONFIG_INVALID`) and logged. A valid file is audited
//! (`config.reloaded`, with the old and new policy-set hashes and whose keys changed) and
//! swapped in whole in that record's store task ([`AppState::put_live`]): a removed or changed
//! key fails from the very next request, while requests that already read the old set finish
//! with it — but for a decision, which the store checks again against the set in force under
//! its write lock ([`crate::decide::still_stands`]), and a proposal, judged by the rules in
//! force when its transaction runs. Reloads are
//! one at a time (a second API call meanwhile is `409 RELOAD_IN_PROGRESS`; a signal waits).
//! Settings a reload cannot change (listen address, database, directories, limits, webhooks,
//! MCP upstreams…) are named in `needs_restart` when the file changed them, and left as they
//! were. A reload applies to the replica it reached.

use crate::config::{Config, ConfigError, Principal, Problem, ReloadSource, restart_only};
use crate::error::ApiError;
use crate::extract::{Operator, Refusal};
use crate::state::{AppState, Live, now_ms};
use assent_api::ApiErrorBody;
use assent_api::error::CONFIG_INVALID;
use assent_api::reload::{ConfigProblem, Reloaded};
use assent_core::grant_standing::Decider;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::BTreeMap;

/// Why a reload was not applied; the old set stays in force.
#[derive(Debug)]
pub enum ReloadError {
    /// The configuration is invalid (`422 CONFIG_INVALID` with `errors`).
    Invalid(Vec<Problem>),
    /// Another reload is running (`409 RELOAD_IN_PROGRESS`).
    Busy,
    /// This server was not started from a configuration file (`409 RELOAD_UNAVAILABLE`).
    Unavailable,
    /// The audit record could not be written (`503 STORE_UNAVAILABLE`).
    Store(String),
    /// This replica's configuration is superseded and the reloaded one is the same
    /// (`503 CONFIG_SUPERSEDED`, saying to load the newest).
    Superseded(String),
}

impl From<crate::generations::NotReloaded> for ReloadError {
    fn from(e: crate::generations::NotReloaded) -> Self {
        use crate::generations::NotReloaded;
        match e {
            NotReloaded::Store(why) => ReloadError::Store(why),
            NotReloaded::Superseded(why) => ReloadError::Superseded(why),
        }
    }
}

impl IntoResponse for ReloadError {
    fn into_response(self) -> Response {
        match self {
            ReloadError::Invalid(errors) => {
                let message = format!(
                    "the configuration was not reloaded: {} error(s); the previous principals, agents and policies stay in force",
                    errors.len()
                );
                let errors = errors.into_iter().map(|p| ConfigProblem {
                    file: p.file,
                    line: p.line,
                    reason: p.reason,
                });
                let body = ApiErrorBody {
                    errors: Some(errors.collect()),
                    ..ApiErrorBody::new(CONFIG_INVALID, message)
                };
                (StatusCode::UNPROCESSABLE_ENTITY, crate::body::Body(body)).into_response()
            }
            ReloadError::Busy => ApiError::new(
                StatusCode::CONFLICT,
                assent_api::error::RELOAD_IN_PROGRESS,
                "another reload is running; try again when it has finished",
            )
            .into_response(),
            ReloadError::Unavailable => ApiError::new(
                StatusCode::CONFLICT,
                assent_api::error::RELOAD_UNAVAILABLE,
                "this gateway was not started from a configuration file",
            )
            .into_response(),
            ReloadError::Store(e) => ApiError::unavailable(e).into_response(),
            ReloadError::Superseded(why) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                assent_api::error::CONFIG_SUPERSEDED,
                why,
            )
            .into_response(),
        }
    }
}

/// Who asked for a reload, as its log and audit records name them.
#[derive(Debug, Clone, Copy)]
pub enum Trigger<'a> {
    /// An operator's `POST /v1/reload` (a reload meanwhile refuses it).
    Operator(&'a str),
    /// SIGHUP (waits for a reload meanwhile).
    Signal,
}

impl Trigger<'_> {
    /// The audit actor: the operator's name, or `system:sighup`.
    fn actor(&self) -> String {
        match self {
            Trigger::Operator(n) => (*n).to_string(),
            Trigger::Signal => "system:sighup".into(),
        }
    }
}

/// Re-reads the configuration, validates it as start-up does, and puts its principals, agents
/// and policies in force; on any error keeps the old set (the errors are logged and returned).
pub async fn reload(st: &AppState, by: Trigger<'_>) -> Result<Reloaded, ReloadError> {
    let r = st.reload.clone().ok_or(ReloadError::Unavailable)?;
    // A SIGHUP during start-up waits for start-up's registration (found by review: one that
    // took the reload lock first withdrew consent before anything was checked).
    crate::generations::registered(st).await;
    let _one = match by {
        Trigger::Operator(_) => r.lock.try_lock().map_err(|_| ReloadError::Busy)?,
        Trigger::Signal => r.lock.lock().await,
    };
    let actor = by.actor();
    let scrape = st.metrics_key_sha256.as_deref().copied();
    let loaded = {
        let r = r.clone();
        tokio::task::spawn_blocking(move || load(&r, scrape))
            .await
            .map_err(|e| ReloadError::Store(e.to_string()))?
    };
    let (cfg, principals) = match loaded {
        Ok(x) => x,
        Err(e) => {
            let errors = e.0;
            for p in &errors {
                tracing::warn!(by = %actor, file = ?p.file, line = ?p.line, reason = %p.reason, "configuration reload refused; the previous set stays in force");
            }
            return Err(ReloadError::Invalid(errors));
        }
    };
    let old = st.live();
    let mut answer = describe(&r, &cfg, &old, &principals, by);
    // A changed key or role set signs the person out of the dashboard too: a session started
    // with the old key must not outlive it; so does removal (found by review: a removed
    // operator's sessions were kept, and signed in again once the name came back). Their
    // sessions, subscriptions and votes go in the transaction that appends the reload's audit
    // record, before the new configuration is in force (found by review: they went first, and
    // a failed audit write then refused the reload with the old principals in force but their
    // votes withdrawn); and again after it, for a session started with the old key in between.
    // Only a change that takes something back withdraws what the principal stood behind: a
    // role added or a Slack account given leaves their votes, grants and tokens standing
    // ([`withdraws_consent`]; found by review: any change voided every token they approved).
    let weakened = answer
        .changed
        .iter()
        .filter(|n| withdraws_consent(&old, &principals, n));
    let gone = fallen_names(&old, weakened.chain(&answer.removed));
    // Registered as the newest before anything is withdrawn or put in force: a reload whose
    // generation cannot be recorded is refused (found by review: it was put in force anyway,
    // unrecorded, so a replica with the older file could start and withdraw what it stood
    // behind).
    let slack_users = cfg.slack_users();
    let live = Live::new(cfg.registry, principals).with_slack_users(slack_users);
    let by_operator = matches!(by, Trigger::Operator(_));
    let recorded = crate::generations::reloading(st, &live, by_operator).await?;
    let data = json!({"file": answer.file, "policy_set_sha256": answer.policy_set_sha256,
        "config_digest": crate::generations::digest_of(st, &live),
        "previous_policy_set_sha256": answer.previous_policy_set_sha256, "added": answer.added,
        "removed": answer.removed, "changed": answer.changed, "needs_restart": answer.needs_restart,
        "principals": what_changed(&old.principals, live.principals.as_slice(), &answer)});
    put_in_force(st, (live, old.clone()), &gone, &actor, data).await?;
    recorded.in_force();
    st.refresh_extension().await;
    if let Err(why) = second_pass(st, &gone, &actor).await {
        answer.warnings.push(why);
    }
    st.changed();
    tracing::info!(by = %actor, agents = answer.agents, policies = answer.policies,
        principals = answer.principals, policy_set_sha256 = %answer.policy_set_sha256,
        removed = ?answer.removed, changed = ?answer.changed, "configuration reloaded");
    for k in &answer.needs_restart {
        tracing::warn!(setting = %k, "the reloaded file changes a setting only a restart applies; it is unchanged");
    }
    // A SIGHUP's answer goes nowhere: its warnings are logged (found by review).
    for w in &answer.warnings {
        tracing::warn!(warning = %w, "the reloaded configuration");
    }
    Ok(answer)
}

/// Why a reload withdraws a vote (`decision.vote_withdrawn`) or revokes a grant
/// (`grant.revoked`).
const WITHDRAWN: &str = "a reload removed the operator who cast or made it, or changed their key, roles or single sign-on";

/// Reads and validates the file as start-up does: the configuration, every principal's key
/// (`key_env` variables are read from this process's environment, as at start-up; the
/// file's `metrics_key_env` only warned about, as it applies at the next start); and no principal's
/// key may be `scrape`, the scrape key in force (found by review: start-up checked it, a
/// reload did not, so a reload giving an operator `key_env: ASSENT_METRICS_KEY` made the
/// Prometheus scraper's key, kept in a scraper's configuration, an operator's key).
fn load(
    r: &ReloadSource,
    scrape: Option<[u8; 32]>,
) -> Result<(Config, Vec<Principal>), ConfigError> {
    let mut cfg = Config::load_with(&r.file, r.strict)?;
    cfg.insecure_demo_keys = r.insecure_demo_keys;
    let principals = cfg.principals()?;
    // `metrics_key_env` takes effect at the next start only: what is wrong with it there is
    // a warning now, not a refusal (found by review: a variable this process lacks refused
    // every reload, urgent key revocations too, until a restart).
    if let Err(e) = cfg.metrics_key() {
        cfg.warnings.push(format!(
            "metrics_key_env, which applies at the next start: {e}"
        ));
    }
    if let Some(p) = principals.iter().find(|p| Some(p.key_sha256) == scrape) {
        return Err(crate::config::raw::at(
            &r.file,
            cfg.principal_line(&p.name),
            format!(
                "principal `{}`: its key is the Prometheus scrape key in force (metrics_key_env), which may read /metrics only; give the principal its own key",
                p.name
            ),
        ));
    }
    Ok((cfg, principals))
}

/// The answer to a reload of `cfg` (with its resolved `new` principals) over `old`.
fn describe(
    r: &ReloadSource,
    cfg: &Config,
    old: &Live,
    new: &[Principal],
    by: Trigger<'_>,
) -> Reloaded {
    let before: BTreeMap<&str, &Principal> = old
        .principals
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let after: BTreeMap<&str, &Principal> = new.iter().map(|p| (p.name.as_str(), p)).collect();
    let names = |f: &dyn Fn(&str) -> bool, m: &BTreeMap<&str, &Principal>| -> Vec<String> {
        m.keys().filter(|n| f(n)).map(|n| n.to_string()).collect()
    };
    let added = names(&|n| !before.contains_key(n), &after);
    let removed = names(&|n| !after.contains_key(n), &before);
    let changed = names(
        &|n| after.get(n).is_some_and(|p| !same_principal(p, before[n])),
        &before,
    );
    let now = restart_only(cfg);
    let needs_restart = r
        .restart_only
        .iter()
        .filter(|(k, v)| now.get(*k) != Some(v))
        .map(|(k, _)| k.to_string())
        .collect();
    let mut warnings = cfg.warnings.clone();
    if let Trigger::Operator(n) = by
        && after.get(n).is_none_or(|p| p.roles().is_none())
    {
        warnings.push(format!(
            "the principal `{n}` who asked for this reload is no longer an operator: its key stops working now"
        ));
    }
    Reloaded {
        file: r.file.display().to_string(),
        agents: cfg.registry.agents.len(),
        policies: cfg.registry.policies().len(),
        principals: new.len(),
        policy_set_sha256: cfg.registry.policy_set_sha256.clone(),
        previous_policy_set_sha256: old.registry.policy_set_sha256.clone(),
        added,
        removed,
        changed,
        needs_restart,
        warnings,
    }
}

/// Whether `a` and `b` are the same principal in every field (key digest, kind, roles, agent,
/// owned agents): compared whole, so a field added to [`Principal`] is compared too.
/// What the reload described by `answer` did to each principal it added or changed, by name,
/// for its `config.reloaded` record: an added one's kind and roles; a changed one's roles added
/// and removed, and which of its key, kind, single sign-on name, Slack account and owned
/// agents changed. Found by review: the record named who changed, not how, so "alice gained
/// admin" read the same as "alice's key was replaced". Keys are never written, not even hashed.
fn what_changed(old: &[Principal], new: &[Principal], answer: &Reloaded) -> serde_json::Value {
    let find = |list: &[Principal], n: &str| list.iter().find(|p| p.name == n).cloned();
    let roles = |p: &Principal| p.roles().map(<[String]>::to_vec).unwrap_or_default();
    let mut out = serde_json::Map::new();
    for n in &answer.added {
        if let Some(p) = find(new, n) {
            let kind = kind_name(&p.kind);
            out.insert(n.clone(), json!({"added": kind, "roles": roles(&p)}));
        }
    }
    for n in &answer.changed {
        let (Some(a), Some(b)) = (find(old, n), find(new, n)) else {
            continue;
        };
        let (ra, rb) = (roles(&a), roles(&b));
        let gained: Vec<&String> = rb.iter().filter(|r| !ra.contains(r)).collect();
        let lost: Vec<&String> = ra.iter().filter(|r| !rb.contains(r)).collect();
        let mut changed = Vec::new();
        for (what, differs) in [
            ("key", a.key_sha256 != b.key_sha256),
            // An operator's roles are its kind's; another kind changed is named whole.
            (
                "kind",
                kind_name(&a.kind) != kind_name(&b.kind) || (ra.is_empty() && a.kind != b.kind),
            ),
            ("sso", a.sso != b.sso),
            ("slack_user_id", a.slack_user_id != b.slack_user_id),
            ("owns", a.owns != b.owns),
        ] {
            if differs {
                changed.push(what);
            }
        }
        out.insert(
            n.clone(),
            json!({"roles_added": gained, "roles_removed": lost, "changed": changed}),
        );
    }
    out.into()
}

/// `operator`, `agent` or `executor`.
fn kind_name(k: &crate::config::PrincipalKind) -> &'static str {
    use crate::config::PrincipalKind as K;
    match k {
        K::Operator { .. } => "operator",
        K::Agent { .. } => "agent",
        K::Executor { .. } => "executor",
    }
}

fn same_principal(a: &Principal, b: &Principal) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// Whether the reload changing principal `name` from its entry in `old` to its entry in `new`
/// takes back anything their consent rested on: anything but roles added, a Slack account
/// given where none was, or owned agents dropped (each only widens what they may do, or
/// loosens separation of duties). The rest — the principal compared whole, so a field added
/// to [`Principal`] counts — withdraws it: a key changed (perhaps stolen), a role removed, a
/// single sign-on identity given, moved or removed (an `oidc:` name may have voted as someone
/// else before), a Slack account moved or removed, an agent now owned, the kind changed.
/// `true` when either entry is missing.
fn withdraws_consent(old: &Live, new: &[Principal], name: &str) -> bool {
    let before = old.principals.iter().find(|p| p.name == name);
    let Some((before, after)) = before.zip(new.iter().find(|p| p.name == name)) else {
        return true;
    };
    let mut harmless = after.clone();
    if let (
        crate::config::PrincipalKind::Operator { roles: was },
        crate::config::PrincipalKind::Operator { roles: now },
    ) = (&before.kind, &mut harmless.kind)
        && was.iter().all(|r| now.contains(r))
    {
        now.clone_from(was);
    }
    if before.slack_user_id.is_none() {
        harmless.slack_user_id = None;
    }
    if harmless.owns.iter().all(|a| before.owns.contains(a)) {
        harmless.owns.clone_from(&before.owns);
    }
    !same_principal(before, &harmless)
}

/// Why an agent key cannot reload.
pub struct ReloadRefusal;

impl Refusal for ReloadRefusal {
    const MESSAGE: &'static str = "only an operator's key may reload the configuration";
}

/// `POST /v1/reload`: an operator re-reads the configuration ([`reload`]). `200` with
/// [`Reloaded`]; `401` without a known key; `403` for an agent's key; `422 CONFIG_INVALID`
/// with `errors` (`file`, `line`, `reason`) when the file is refused (the old set stays);
/// `409 RELOAD_IN_PROGRESS`, `409 RELOAD_UNAVAILABLE`, `503 STORE_UNAVAILABLE`.
#[utoipa::path(post, path = "/v1/reload", tag = "around",
    responses((status = 200, description = "The new configuration is in force", body = Reloaded), (status = 409, description = "Another reload is running (`RELOAD_IN_PROGRESS`), or the gateway was not started from a file (`RELOAD_UNAVAILABLE`)", body = ApiErrorBody), (status = 422, description = "The file was refused (`CONFIG_INVALID`, each problem in `errors`); the old set stays in force", body = ApiErrorBody)),
    security(("operator_key" = [])))]
pub async fn reload_route(State(st): State<AppState>, op: Operator<ReloadRefusal>) -> Response {
    // Apart from the request: what the reload asks the store's executor to commit is committed
    // whether or not its client waits, so the rest of it must run to the end too (found by
    // review: a client hanging up dropped the handler between the `config.reloaded` record,
    // with its withdrawals, and the swap, and the old keys stayed in force).
    let name = op.name().to_string();
    let done = tokio::spawn(async move { reload(&st, Trigger::Operator(&name)).await });
    match done.await {
        Ok(Ok(r)) => crate::body::Body(r).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => ReloadError::Store(format!("the reload stopped: {e}")).into_response(),
    }
}

/// Every name whose consent falls with the principals `names` (those a reload took something
/// from or removed), as `old` knew them: each name itself; the single sign-on names linked to
/// it, bare and as `oidc:NAME` (a linked person's dashboard session and votes go by those);
/// and for an agent, its user's in-client name `user-of:ID` (those approvals rest on the
/// agent's key).
fn fallen_names<'a>(old: &Live, names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        out.push(n.clone());
        let sso = old.principals.iter().filter(|p| &p.name == n);
        for s in sso.flat_map(|p| p.sso.iter()) {
            out.push(s.clone());
            out.push(format!("{}{s}", crate::config::oidc::NAME_PREFIX));
        }
        // An agent key's in-client approvals rest on that key (found by review: a stolen
        // agent key approved R1/R2 calls in the client, and its tokens outlived the key's
        // rotation or removal): the agent's user goes with it.
        for p in old.principals.iter().filter(|p| &p.name == n) {
            if let crate::config::PrincipalKind::Agent { agent_id } = &p.kind {
                let user = format!("{}{agent_id}", crate::standing::IN_CLIENT_USER);
                if !out.contains(&user) {
                    out.push(user);
                }
            }
        }
    }
    out
}
/// Appends `config.reloaded` (`data`) and withdraws what the principals `gone` stood behind
/// ([`assent_store::Store::revoke_and_audit`]) in one store task, and puts `live` in force in
/// it; `old` goes back when that task or its batch's commit fails (`503`-like
/// [`ReloadError::Store`]). The new rules and principals are in force from the store's next
/// write on: a decision or proposal written after `config.reloaded` (in the same group commit
/// too) is judged by them. Found by review: the rules were set after the task answered, and the
/// principals swapped only after it and a store round more, so a decision by a key the reload
/// removed, written between, stood as the old key's and its token could be redeemed before
/// the second pass; and a batch whose commit failed was taken back only when the reload's own
/// task next ran, after calls of the next batch were judged by a configuration never recorded.
async fn put_in_force(
    st: &AppState,
    (live, old): (Live, std::sync::Arc<Live>),
    gone: &[String],
    actor: &str,
    data: serde_json::Value,
) -> Result<(), ReloadError> {
    let (actor, gone) = (actor.to_string(), gone.to_vec());
    let (state, live) = (st.clone(), std::sync::Arc::new(live));
    // A batch whose commit failed takes the configuration back before any later call.
    let (undo, before) = (st.clone(), old.clone());
    let settle = move |committed: bool| {
        if !committed {
            undo.put_live(before);
        }
    };
    let audited = st
        .store_task_settled(
            move |s| {
                let record = ("config.reloaded", &data);
                s.revoke_and_audit(&gone, &actor, WITHDRAWN, record, now_ms())?;
                state.put_live(live);
                Ok::<_, assent_store::StoreError>(())
            },
            settle,
        )
        .await;
    let failed = match audited {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e.to_string(),
        Err(e) => format!("{e:?}"),
    };
    // Not in force: the old configuration goes back (the task's write failed).
    st.put_live(old);
    Err(ReloadError::Store(failed))
}

/// The reload's second pass ([`sign_out`], after the swap), tried three times (found by
/// review: one store error left what a removed key approved between the passes standing, the
/// reload answering 200 all the same). `Err`: the warning the answer carries (also logged).
async fn second_pass(st: &AppState, gone: &[String], actor: &str) -> Result<(), String> {
    let mut done = sign_out(st, gone, actor).await;
    for wait in [100, 400] {
        if done.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        done = sign_out(st, gone, actor).await;
    }
    done.map_err(|why| {
        tracing::error!(%why, "what changed principals stood behind between the reload's two passes was not withdrawn");
        format!(
            "the sessions, subscriptions, votes and grants of changed principals made while this reload ran could not be withdrawn ({why}): restart the replica, whose start-up withdraws them"
        )
    })
}

/// Ends every dashboard session, closes every AAEP subscription (actor `by`), withdraws
/// every vote on a pending approval ([`assent_store::Store::withdraw_votes`]) and revokes
/// every active grant ([`assent_store::Store::revoke_grants_of`], which also voids the
/// unredeemed tokens of approvals that rested on them: a decision made with the old key
/// between the reload's two passes) of the principals `names` (a reload changed their key or
/// roles, or removed them; with their linked single sign-on names); `Err(why)` when the store
/// could not. The subscriptions' timeout extension
/// goes with them. Found by review: a vote cast with a key revoked since, or by an operator
/// removed or stripped of the role, still counted towards its quorum; and the `workspace` or
/// `whole_tool` grants of a stolen key removed by reload kept letting calls through.
async fn sign_out(st: &AppState, names: &[String], by: &str) -> Result<(), String> {
    let (names, by) = (names.to_vec(), by.to_string());
    let done = st
        .store_task(move |s| {
            names.iter().try_for_each(|n| {
                s.end_ui_sessions_of(n)?;
                s.close_subscriptions_of(n, &by, now_ms()).map(drop)
            })?;
            s.withdraw_votes(
                |p, _, _| !names.iter().any(|n| n == p),
                &by,
                WITHDRAWN,
                now_ms(),
            )?;
            s.revoke_grants_of(&names, &by, WITHDRAWN, now_ms())
                .map(drop)
        })
        .await;
    st.refresh_extension().await;
    match done {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("{e:?}")),
    }
}

/// What the principals `live` in force make of `made_by`, the principal whose decision made a
/// grant ([`assent_core::grant_standing::grant_stands`] weighs it): an operator and the roles
/// they hold now; an `oidc:` name linked to no principal, while single sign-on is configured
/// (`sso`); or unknown (removed or renamed, or now an agent). What start-up checks each active
/// grant against.
pub(crate) fn decider_now<'a>(live: &'a [Principal], sso: bool, made_by: &str) -> Decider<'a> {
    match live.iter().find(|p| p.name == made_by) {
        Some(p) => p.roles().map_or(Decider::Unknown, Decider::Operator),
        None if sso && made_by.starts_with(crate::config::oidc::NAME_PREFIX) => {
            Decider::UnlinkedSso
        }
        None => Decider::Unknown,
    }
}
