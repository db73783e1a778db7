//! Approval tokens and grants (seed 002 "Execution requires", "Approve with scope"; issue 14
//! §6): minting a token in a decision's transaction, signing it (a JWS with the current
//! Ed25519 token key, [`crate::keys`]), publishing the public keys (JWKS), redeeming it once
//! (by its agent or an executor of the call), and the
//! stored grants (listing, revoking; finding the one that covers a call is [`cover`]). Which
//! grant covers a call and what a new grant binds are `assent_core::grant` rules.

pub(crate) mod cover;
mod origin;
pub(crate) mod sealed;
mod verified;

use self::origin::{origin_plans_run, plan_runs};
use self::sealed::GrantSeal;
pub use self::verified::VerifiedToken;
use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::{RedeemError, StoreError};
use crate::params;
use crate::record::ApprovalRecord;
use crate::seal::{SealKey, Sealed};
use crate::sql::{self, from_row};
use crate::store::Store;
use assent_core::RiskTier;
use assent_core::approval::GrantScope;
use assent_core::grant::{self, Grant};
use assent_core::policy::{Delegations, NO_DELEGATIONS};
use assent_core::redeem::{self, Presenter, Refusal};
use assent_core::token::{Jwks, TokenClaims};
use serde_json::{Value, json};

/// A `tokens` row's sealed columns ([`crate::seal`]): everything the signed token and its
/// redemption are made of (`used_at` is not: a token made unused again is found by `audit
/// verify`).
struct TokenRow<'a> {
    token_id: &'a str,
    approval_id: &'a str,
    agent: &'a str,
    call_hash: &'a str,
    issued_at: i64,
    expires_at: i64,
    scope: &'a str,
    device_id: Option<&'a str>,
}

impl TokenRow<'_> {
    /// `[token_id, approval_id, agent, call_hash, issued_at, expires_at, scope, device_id]`.
    fn columns(&self) -> Value {
        json!([
            self.token_id,
            self.approval_id,
            self.agent,
            self.call_hash,
            self.issued_at,
            self.expires_at,
            self.scope,
            self.device_id
        ])
    }
}

/// The `token.minted` record of `t`; `removed_foreign_rows` when a row under another agent
/// was removed for it ([`Store::mint`]).
fn minted_record(t: &TokenRow<'_>, foreign: usize) -> Value {
    let mut data = json!({"token_id": t.token_id, "call_hash": t.call_hash, "agent": t.agent,
        "expires_at": t.expires_at, "scope": t.scope, "device_id": t.device_id});
    if foreign > 0 {
        data["removed_foreign_rows"] = json!(foreign);
    }
    data
}

impl Store {
    /// Mints the single-use token of approval `id` for `agent`, bound to `call_hash` and the
    /// client device (if any), valid for the store's token lifetime; audits `token.minted`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mint(
        &self,
        tx: Conn<'_>,
        approval_id: &str,
        agent: &str,
        call_hash: &str,
        scope: &str,
        device_id: Option<&str>,
        actor: &str,
        now: i64,
    ) -> db::Result<()> {
        let tid = crate::kit::ordered_uuid(now);
        let exp = now.saturating_add(self.token_ttl_ms);
        let row = TokenRow {
            token_id: &tid,
            approval_id,
            agent,
            call_hash,
            issued_at: now,
            expires_at: exp,
            scope,
            device_id,
        };
        let seal = self.seal_key(Sealed::Token).seal(&row.columns());
        // A row under another agent is never this approval's token (`read_approval` does not
        // see it, so `decide::admit` cannot refuse for it): planted, it made this insert fail
        // on the unique approval id, every second for the expiry sweep. Its removal is
        // recorded.
        let foreign = tx
            .prepare_cached("DELETE FROM tokens WHERE approval_id = ?1 AND agent <> ?2")?
            .execute(params![approval_id, agent])?;
        tx.prepare_cached("INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at, scope, device_id, seal) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)")?.execute(
            params![tid, approval_id, agent, call_hash, now, exp, scope, device_id, seal],
        )?;
        audit::append(
            tx,
            now,
            "token.minted",
            Some(approval_id),
            actor,
            &minted_record(&row, foreign),
        )
    }

    /// Whether `rec`'s token row holds its seal ([`crate::seal`]); `false` when it has no
    /// token.
    fn token_holds(&self, rec: &crate::ApprovalRecord) -> bool {
        let Some(t) = rec.token.as_ref() else {
            return false;
        };
        let row = TokenRow {
            token_id: &t.token_id,
            approval_id: &rec.id,
            agent: &rec.agent,
            call_hash: &t.call_hash,
            issued_at: t.issued_at,
            expires_at: t.expires_at,
            scope: &t.scope,
            device_id: t.device_id.as_deref(),
        };
        self.seal_key(Sealed::Token).holds(&row.columns(), &t.seal)
    }

    /// `rec` as the store vouches for it to readers (its reads, and the record a decision
    /// returns and its events carry): a token row whose seal does not hold
    /// ([`crate::seal`]) is left out (`token: None`, as for an approval no token was minted
    /// for), so that no view (the approval's `approval_token`, its AAEP and MPLP forms) shows
    /// a token nothing will redeem. A row with a seal that is not its own (planted with
    /// another row's seal, or edited) is also named in `damaged` as `tokens.seal`; one with
    /// none (minted before migration 0028, or planted without) is only left out. A pending
    /// approval's quorum votes are vouched for too ([`crate::votes::vouch`]: a row whose seal
    /// does not hold is left out, `votes.seal` named when it carries one not its own).
    pub(crate) fn vouched(&self, mut rec: crate::ApprovalRecord) -> crate::ApprovalRecord {
        if !rec.votes.is_empty() && crate::votes::vouch(&mut rec, &self.seal_key(Sealed::Vote)) {
            rec.damaged.push("votes.seal".into());
        }
        if rec.token.is_some() && !self.token_holds(&rec) {
            let sealed = rec.token.take().is_some_and(|t| !t.seal.is_empty());
            if sealed {
                rec.damaged.push("tokens.seal".into());
            }
        }
        rec
    }

    /// The signed token string of approval record `rec` as read after its decision (its
    /// agent; its minted token's id, call hash, scope and times), signed without a store trip:
    /// the token [`Store::approval_and_token`] would give its agent for the same record.
    /// `None` when no token was minted, or its row's seal is not its own ([`crate::seal`]).
    pub fn token_of(&self, rec: &crate::ApprovalRecord) -> Option<String> {
        let t = rec.token.as_ref()?;
        if !self.token_holds(rec) {
            return None;
        }
        let c = claims(
            t.token_id.clone(),
            rec.agent.clone(),
            &rec.id,
            t.call_hash.clone(),
            t.scope.clone(),
            (t.issued_at, t.expires_at),
        );
        Some(self.key.signer().sign(&c))
    }

    /// The signed token string for a minted token of approval `id`, for its agent.
    pub fn token_string(&self, id: &str) -> Result<Option<String>, StoreError> {
        let guard = self.lock();
        let seal = self.seal_key(Sealed::Token);
        Ok(signed_token(guard.conn(), &self.key, &seal, id)?)
    }

    /// The public token keys that verify at `now` (Unix ms): the current key and the retired
    /// ones whose tokens may not have expired yet ([`crate::keys`]), for `GET /v1/keys`.
    pub fn token_jwks(&self, now: i64) -> Jwks {
        self.key.jwks(now, self.token_ttl_ms)
    }

    /// Redeems `token` for `agent`'s call with hash `call_hash`, from client device
    /// `device_id`, atomically and once ([`Store::redeem_as`] by the agent itself, with no
    /// declared delegation: only a plan of the call's own agent can have stopped it).
    pub fn redeem(
        &self,
        token: &str,
        agent: &str,
        call_hash: &str,
        device_id: Option<&str>,
        now: i64,
    ) -> Result<TokenClaims, RedeemError> {
        let by = Presenter::Agent(agent);
        self.redeem_as(token, by, call_hash, device_id, now, &NO_DELEGATIONS)
    }

    /// Redeems `token`, presented by `by` (the agent it was issued to, or an executor of the
    /// call: [`redeem::check`]), for the call with hash `call_hash` from client device
    /// `device_id`, atomically and once. A token bound to a device (the agent sent a
    /// `device_id` with the call) is refused from any other or no device. Every attempt,
    /// successful or not, is audited (`token.redeemed` / `token.refused`, actor the presenting
    /// principal: the agent id, or the executor's name with `"executor": true`). A call held
    /// under an MPLP plan that gates it (its agent's own, or, as `delegations` from the
    /// operator's agent files say, one of an agent that declares it a local delegate) is
    /// refused while that plan does not run (`PlanStopped`), and a token whose approval's
    /// settlement does not hold its seal ([`crate::settlement_seal`]) is refused (`Unsealed`,
    /// audited `token.refused` like every refusal; the token stays unused, start-up voids it),
    /// as is one whose approval's terms do not hold theirs ([`crate::approval_seal`]: they
    /// cover the plan ids by which the plan's stop reaches the call).
    pub fn redeem_as(
        &self,
        token: &str,
        by: Presenter<'_>,
        call_hash: &str,
        device_id: Option<&str>,
        now: i64,
        delegations: &Delegations,
    ) -> Result<TokenClaims, RedeemError> {
        let verified = self.verify_token(token, now);
        self.redeem_verified(verified, by, call_hash, device_id, now, delegations)
    }

    /// [`Store::redeem_as`] of a token whose signature [`Store::verify_token`] checked
    /// before (off the store's writer): the same checks, refusals and audit records.
    pub fn redeem_verified(
        &self,
        verified: VerifiedToken,
        by: Presenter<'_>,
        call_hash: &str,
        device_id: Option<&str>,
        now: i64,
        delegations: &Delegations,
    ) -> Result<TokenClaims, RedeemError> {
        let claims = verified.into_claims();
        let presented = redeem::Presented {
            by,
            call_hash,
            device_id,
            now,
        };
        let (actor, executor) = match by {
            Presenter::Agent(a) => (a, false),
            Presenter::Executor { name, .. } => (name, true),
        };
        // A refusal is audited and commits (`RedeemError: Settles`); a store failure, not.
        let seals = (
            self.seal_key(Sealed::Token),
            self.seal_key(Sealed::Settlement),
        );
        let terms = (self.seal_key(Sealed::Approval), self.seal_key(Sealed::Plan));
        let grants = self.seal_key(Sealed::Grant);
        self.write(|tx| {
            // Under the write lock (found by review: read before it, a redemption waiting on
            // the writer while a reload was recorded was judged by the old rules).
            let rules = self.rules();
            let result = claims.clone().ok_or(RedeemError::Invalid).and_then(|c| {
                let aid = c.aid.clone();
                let sealed = std::cell::OnceCell::new();
                let plan = |tx: Conn<'_>| {
                    let _ = sealed.set(plan_runs(tx, &aid, (&terms, delegations))?);
                    Ok(())
                };
                let origins_run = |tx: Conn<'_>| {
                    origin_plans_run(tx, &aid, &grants, (&terms, delegations))?;
                    if let Some((session_id, by)) = crate::session_over::of_approval(tx, &aid)? {
                        return Err(RedeemError::SessionCancelled { session_id, by });
                    }
                    let held = sealed.get().ok_or(RedeemError::Unsealed)?.as_deref();
                    let (rules, held) = (rules.as_deref(), (held, aid.as_str()));
                    crate::decision_input::redeem_refusal(tx, rules, held, now)?;
                    // Nor while its tool's changed definition awaits review (found by review:
                    // a token minted before the upstream changed the tool ran the new one).
                    match crate::pins::review_holding_approval(tx, &aid)? {
                        Some((review, server, tool)) => Err(RedeemError::ToolUnderReview {
                            review,
                            server,
                            tool,
                        }),
                        None => Ok(()),
                    }
                };
                let plans = (plan, origins_run);
                consume(**tx, c, &presented, (&seals.0, &seals.1), plans)
            });
            let aid = claims.as_ref().map(|c| c.aid.as_str());
            let jti = claims.as_ref().map(|c| c.jti.clone());
            let mut data = json!({"token_id": jti, "call_hash": call_hash, "device_id": device_id});
            if executor {
                data["executor"] = json!(true);
            }
            match &result {
                Ok(_) => audit::append(**tx, now, "token.redeemed", aid, actor, &data)?,
                Err(RedeemError::Store(_)) => {}
                Err(e) => {
                    data["error"] = json!(e.to_string());
                    audit::append(**tx, now, "token.refused", aid, actor, &data)?
                }
            }
            result
        })
    }

    /// One page of grants, newest first (`created_at`, then insertion order), starting after
    /// `before` (`None`: the newest): at most `limit` (at least 1) rows read, and the cursor of
    /// the next page (`(created_at, rowid)` of the last row read; `None` on the last page).
    /// Only active grants (not revoked, not expired at `now`, and holding their seal: a row
    /// planted, edited or from before migration 0028 covers no call, so it is not listed as
    /// active — found by review) unless `all`. Inactive rows are left out by the query itself,
    /// so a page of them never stands before an active grant; a page whose rows all fail their
    /// seal comes back empty with a cursor (follow it). Read in one snapshot beside the writer
    /// ([`Store::aside`]). Found by review: `?all=true` read every grant ever made, whole, on the
    /// writer's connection, and grants accumulate with every scoped approval.
    pub fn list_grants(
        &self,
        all: bool,
        now: i64,
        limit: u32,
        before: Option<(i64, i64)>,
    ) -> Result<GrantPage, StoreError> {
        let (at, row) = before.unwrap_or((i64::MAX, i64::MAX));
        let n = i64::from(limit.max(1));
        let sql = format!(
            "SELECT id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at, revoked_at, revoked_by, seal, key_binding, rowid AS page_row
             FROM grants WHERE (?1 OR (revoked_at IS NULL AND {}))
               AND created_at <= ?3 AND (created_at < ?3 OR rowid < ?4)
             ORDER BY created_at DESC, rowid DESC LIMIT ?5",
            sql::grant_unexpired_at("?2")
        );
        let mut rows: Vec<(Grant, String, Option<String>, i64)> = self
            .aside(|c| sql::rows(c, &sql, crate::params![all, now, at, row, n + 1], grant_row))?;
        let next = (rows.len() as i64 > n).then(|| {
            rows.truncate(n as usize);
            rows.last().map(|(g, .., r)| (g.created_at, *r))
        });
        let key = self.seal_key(Sealed::Grant);
        let listed = rows
            .into_iter()
            .filter(|(g, seal, bound, _)| {
                all || GrantSeal::of(g, bound.as_deref()).holds(&key, seal)
            })
            .map(|(g, ..)| g)
            .collect();
        Ok((listed, next.flatten()))
    }

    /// Revokes grant `id` (`grant.revoked`) and, in the same transaction, voids the tokens it
    /// minted that are neither redeemed nor expired (`token.voided` each:
    /// [`crate::voided::void_grant_tokens`]; redeeming one is then `TOKEN_USED`). `Ok(false)`
    /// when there is no such grant or it was revoked already.
    pub fn revoke_grant(&self, id: &str, actor: &str, now: i64) -> Result<bool, StoreError> {
        self.write(|tx| {
            let revoked: Option<String> = tx
                .prepare_cached("UPDATE grants SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1 AND revoked_at IS NULL RETURNING approval_id")?
                .query_row(params![id, now, actor], |r| r.get(0))
                .optional()?;
            if let Some(aid) = &revoked {
                let data = json!({"grant_id": id});
                audit::append(**tx, now, "grant.revoked", Some(aid), actor, &data)?;
                let why = "the grant was revoked";
                crate::voided::void_grant_tokens(**tx, (id, aid), (actor, why), now)?;
            }
            Ok(revoked.is_some())
        })
    }
}

/// One page of [`Store::list_grants`]: its grants, and the cursor of the next page
/// (`(created_at, rowid)`; `None` on the last page).
pub(crate) type GrantPage = (Vec<Grant>, Option<(i64, i64)>);

/// A `grants` row of [`Store::list_grants`]: the grant, its seal, its key binding and its
/// `rowid` (as `page_row`).
fn grant_row(r: &db::Row<'_>) -> db::Result<(Grant, String, Option<String>, i64)> {
    let call_hash: Option<String> = r.get("call_hash")?;
    let tier: String = r.get("risk_tier")?;
    let g: db::Result<Grant> = from_row!(r => Grant {
        id, agent, session_id, tool, server, scope, discouraged, approval_id,
        created_by, created_at, expires_at, revoked_at, revoked_by,
        whole_tool: call_hash.is_none(),
        call_hash: call_hash,
        risk_tier: RiskTier::parse(&tier).unwrap_or(RiskTier::R4)
    });
    Ok((
        g?,
        r.get("seal")?,
        r.get("key_binding")?,
        r.get("page_row")?,
    ))
}

/// A grant being created by an approval's decision.
pub(crate) struct NewGrant<'a> {
    /// The approval decided.
    pub rec: &'a ApprovalRecord,
    /// The approved call's hash (of the edit, when edited).
    pub call_hash: &'a str,
    /// The decided scope (not `once`).
    pub scope: GrantScope,
    /// What it binds ([`grant::terms`]).
    pub terms: grant::GrantTerms,
    /// Widened from the exact call to every call of the tool.
    pub whole_tool: bool,
    /// `workspace`, or a timed scope outlasting a `session` grant, on an R3/R4 tool
    /// ([`assent_core::decision::workspace_discouraged`]).
    pub discouraged: bool,
    /// What stood behind the decision, as the server says it
    /// ([`crate::DecisionInput::decider_key`]: the binding of the operator key it was made
    /// with, or the channel's), kept and sealed with the grant (migration 0048): start-up
    /// revokes the grant when it is not its maker's any more (a key rotated by a restart).
    pub key: Option<&'a str>,
}

/// Stores grant `g` by `actor` with its key binding (`g.key`) and maker (`actor`) under its
/// seal ([`GrantSeal::seal`]), links it to its approval and audits `grant.created`; returns
/// its id (UUID v4).
pub(crate) fn create_grant(
    tx: Conn<'_>,
    seal: &SealKey,
    g: &NewGrant<'_>,
    actor: &str,
    now: i64,
) -> db::Result<String> {
    let (rec, t) = (g.rec, g.terms);
    let gid = uuid::Uuid::new_v4().to_string();
    let scope_wire = g.scope.to_wire();
    let session = t.session_bound.then_some(&rec.session_id);
    let hash = t.exact_call.then_some(g.call_hash);
    let cols = (
        gid.as_str(),
        rec.agent.as_str(),
        session.map(String::as_str),
        rec.call.tool.as_str(),
        rec.call.server.as_deref(),
        hash,
        scope_wire.as_ref(),
        t.expires_at,
        rec.id.as_str(),
        now,
    );
    let sealed = GrantSeal {
        cols,
        binding: g.key,
        created_by: actor,
    }
    .seal(seal);
    tx.prepare_cached("INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at, seal, key_binding) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)")?
        .execute(params![gid, rec.agent, session, rec.call.tool, rec.call.server, hash,
            scope_wire, rec.terms.risk_tier.as_str(), g.discouraged, rec.id, actor, now, t.expires_at, sealed, g.key])?;
    tx.prepare_cached("UPDATE approvals SET grant_id = ?2 WHERE id = ?1")?
        .execute(params![rec.id, gid])?;
    audit::append(
        tx,
        now,
        "grant.created",
        Some(&rec.id),
        actor,
        &json!({
        "grant_id": gid, "agent": rec.agent, "session_id": session, "tool": rec.call.tool,
        "server": rec.call.server, "call_hash": hash, "whole_tool": g.whole_tool,
        "scope": scope_wire, "expires_at": t.expires_at, "discouraged": g.discouraged}),
    )?;
    Ok(gid)
}

/// The signed token string of approval `id`'s minted token, if any: its `tokens` row as
/// [`TokenClaims`] (times in whole seconds, rounded down: an offline verifier never accepts
/// it longer than the store does) signed with the current token key of `keys` (what
/// [`Store::token_string`] returns).
pub(crate) fn signed_token(
    c: Conn<'_>,
    keys: &crate::token_keys::TokenKeys,
    seal: &SealKey,
    id: &str,
) -> db::Result<Option<String>> {
    type Row = (
        String,
        String,
        String,
        i64,
        i64,
        Option<String>,
        (Option<String>, String),
    );
    let row: Option<Row> = c
        .prepare_cached(
            "SELECT token_id, agent, call_hash, issued_at, expires_at, scope, device_id, seal FROM tokens WHERE approval_id = ?1",
        )?
        .query_row([id], |r| {
            let (device, s) = (r.get(6)?, r.get(7)?);
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, (device, s)))
        })
        .optional()?;
    Ok(
        row.and_then(|(jti, sub, call_hash, iat, exp, scope, (device, s))| {
            let scope = scope.unwrap_or_else(|| "once".to_string());
            let row = TokenRow {
                token_id: &jti,
                approval_id: id,
                agent: &sub,
                call_hash: &call_hash,
                issued_at: iat,
                expires_at: exp,
                scope: &scope,
                device_id: device.as_deref(),
            };
            seal.holds(&row.columns(), &s).then(|| {
                keys.signer()
                    .sign(&claims(jti, sub, id, call_hash, scope, (iat, exp)))
            })
        }),
    )
}

/// The claims of token `jti` of approval `aid` for agent `sub`, bound to `call_hash` with
/// `scope`, issued and expiring at `(iat, exp)` (Unix ms; whole seconds in the claims).
fn claims(
    jti: String,
    sub: String,
    aid: &str,
    call_hash: String,
    scope: String,
    (iat, exp): (i64, i64),
) -> TokenClaims {
    TokenClaims {
        jti,
        sub,
        aid: aid.to_string(),
        call_hash,
        scope,
        iat: iat.div_euclid(1000),
        exp: exp.div_euclid(1000),
    }
}

/// Checks token `c` against the attempt ([`redeem::check`] on its stored row, whose seal must
/// hold under `seal`) and marks it used, once (a concurrent redemption that got there first
/// makes this one `Used`). The approval's settlement must hold its seal under `settled`
/// ([`crate::settlement_seal::holds`]: one read of the approval's row, decisions and votes by
/// their approval id, and one HMAC), else `Unsealed`. Found by review: the seal was checked
/// only at start-up ([`crate::voided`]) and by `assent audit verify`, so a database writer who
/// edited a settlement while the gateway ran (a rejected approval turned approved, a
/// decision's `key_binding` cleared so a later key rotation would not void it, a voter
/// renamed) had its token redeem until the next start. `plans.0` ([`plan_runs`]) is checked
/// once the presenter is known to be the token's agent or executor, before the token's other
/// refusals (found by review: checked before the presenter, another agent's token was answered
/// `PlanStopped`, naming the owner's plan and its status, where a token not one's own is
/// `WrongAgent`); `plans.1` ([`origin_plans_run`]) last, before the token is marked used.
fn consume(
    tx: Conn<'_>,
    c: TokenClaims,
    p: &redeem::Presented<'_>,
    (seal, settled): (&SealKey, &SealKey),
    (plan_runs, origins_run): (
        impl FnOnce(Conn<'_>) -> Result<(), RedeemError>,
        impl FnOnce(Conn<'_>) -> Result<(), RedeemError>,
    ),
) -> Result<TokenClaims, RedeemError> {
    type Row = (
        String,
        String,
        i64,
        Option<i64>,
        Option<String>,
        (i64, String, String),
    );
    let row: Option<Row> = tx
        .prepare_cached("SELECT agent, call_hash, expires_at, used_at, device_id, issued_at, scope, seal FROM tokens WHERE token_id = ?1 AND approval_id = ?2")?
        .query_row(params![c.jti, c.aid], |r| {
            let sealed = (r.get(5)?, r.get(6)?, r.get(7)?);
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, sealed))
        })
        .optional()?;
    let (agent, hash, expires_at, used, device, (issued_at, scope, s)) =
        row.ok_or(RedeemError::Invalid)?;
    // A row whose seal is not its own was not minted by a gateway: it redeems nothing.
    let row = TokenRow {
        token_id: &c.jti,
        approval_id: &c.aid,
        agent: &agent,
        call_hash: &hash,
        issued_at,
        expires_at,
        scope: &scope,
        device_id: device.as_deref(),
    };
    if !seal.holds(&row.columns(), &s) {
        return Err(RedeemError::Invalid);
    }
    let minted = redeem::Minted {
        agent: &agent,
        call_hash: &hash,
        expires_at,
        used: used.is_some(),
        device_id: device.as_deref(),
    };
    let checked = redeem::check(&minted, &c, p).map_err(|r| match r {
        Refusal::WrongAgent => RedeemError::WrongAgent,
        Refusal::NotExecutor(executor) => RedeemError::NotExecutor { executor },
        Refusal::Used => RedeemError::Used,
        Refusal::Expired => RedeemError::Expired,
        Refusal::DeviceMismatch => RedeemError::DeviceMismatch,
        Refusal::Mismatch(approved) => RedeemError::Mismatch {
            approved,
            presented: p.call_hash.to_string(),
        },
    });
    if let Err(e @ (RedeemError::WrongAgent | RedeemError::NotExecutor { .. })) = checked {
        return Err(e);
    }
    plan_runs(tx)?;
    checked?;
    if !crate::settlement_seal::holds(tx, settled, &c.aid)? {
        return Err(RedeemError::Unsealed);
    }
    // Beside the voiding in the revoking transaction (`crate::voided::void_grant_tokens`): a
    // token minted under a grant revoked since (by a gateway before that fix, in a race between
    // replicas, or with `approvals.grant_id` cleared behind the gateway's back) is voided now,
    // by the redemption (who revoked the grant is in the record).
    if let Some(data) = crate::consent::withdrawn_grant(tx, &c.aid)? {
        crate::voided::void_token(tx, (&c.jti, &c.aid), "system:redeem", data, p.now)?;
        return Err(RedeemError::Used);
    }
    origins_run(tx)?;
    // The audit chain's word beside the row's: a token whose approval has its
    // `token.redeemed` or `token.voided` record was used, whatever `used_at` says now (one
    // token per approval: `tokens.approval_id` is unique). Found by review: a writer who set
    // `used_at` back to NULL had the token redeem a second time (`audit verify` reported it,
    // after the fact).
    if used_on_the_record(tx, &c.aid)? {
        return Err(RedeemError::Used);
    }
    let n = tx
        .prepare_cached("UPDATE tokens SET used_at = ?2 WHERE token_id = ?1 AND used_at IS NULL")?
        .execute(params![c.jti, p.now])?;
    if n != 1 {
        return Err(RedeemError::Used);
    }
    // The call may run now: its session takes in what it brings (issue 16 §3).
    crate::session_risk::on_redeem(tx, &c.aid, p.now)?;
    Ok(c)
}

/// Whether approval `aid`'s token has a `token.redeemed` or `token.voided` audit record: two
/// look-ups, each through its partial index (`audit_redeemed`, migration 0053; `audit_voided`,
/// 0062; found by review: one query over both kinds could use neither and read the whole audit
/// log under the write lock). Errors: the store's.
fn used_on_the_record(tx: Conn<'_>, aid: &str) -> Result<bool, RedeemError> {
    for look_up in [USED_SQL, VOIDED_SQL] {
        let hit = tx
            .prepare_cached(look_up)?
            .query_row(params![aid], |r| r.get::<i64>(0))
            .optional()?;
        if hit.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// An approval's `token.redeemed` record ([`used_on_the_record`]).
const USED_SQL: &str =
    "SELECT 1 FROM audit WHERE approval_id = ?1 AND kind = 'token.redeemed' LIMIT 1";
/// An approval's `token.voided` record ([`used_on_the_record`]).
const VOIDED_SQL: &str =
    "SELECT 1 FROM audit WHERE approval_id = ?1 AND kind = 'token.voided' LIMIT 1";
