//! Counterfactual replay (issue 16 §1): every recorded proposal re-evaluated under a candidate
//! policy, in the order it was recorded, and what would have changed.
//!
//! The history is what the store's audit log says happened ([`Recorded`]: the call, the verdict
//! then, and what a person or a grant did with a held call); the candidate is a [`Registry`].
//! [`Replayer::push`] evaluates one recorded proposal with the gatekeeper itself
//! ([`crate::gatekeeper::evaluate_in`]) and classifies the change ([`Change`]);
//! [`Replayer::finish`] gives the [`report::Report`]: counts per tool and overall, prompts before
//! and after, examples with the rules responsible, and every *loosened* call — one that was denied
//! outright or rejected by a person and would now run without anyone's consent (the CI gate).
//!
//! What replay keeps from the time of each proposal, because no policy decides it:
//! - the session's earlier calls, for rate and cost thresholds: those that counted then
//!   (allowed, granted, pending, approved — [`Was::counts`]), in recorded order, kept as the
//!   store keeps them ([`crate::triggers::window`]: running cost totals per tool and the calls
//!   inside the longest rate window), so a call's cost does not grow with its session's length;
//! - what the session had taken in (issue 16 §3: untrusted output, private data, egress), marked
//!   as the store marks it — by each earlier call that ran (allowed, granted, approved), with
//!   the effects the *candidate's* rules give its tool; changes of pinned tool definitions are
//!   not in the history and are not replayed;
//! - plan and tool-review blocks (a denial whose reason is the `mplp plan` rule): re-applied;
//! - paths are checked lexically (symlinks are not resolved again: the filesystem of then is
//!   gone);
//! - a grant that covered a held call is assumed to cover it again when the new verdict is a
//!   confirm a grant may stand in for ([`crate::grant::may_use_grant`]: no threshold, scope or
//!   session trigger, reversible, no passkey, no quorum); and the grants standing when the
//!   replay runs ([`Replayer::with_standing_grants`]) cover such a confirm as they would once
//!   the candidate is in force: a call the policy denied then that one of them covers is
//!   *loosened*.
//!
//! Synthetic calls (`mplp.*` Confirm targets, `delegate.*` delegations, `result.*` held
//! results) are counted as not replayed: their verdicts come from other entry points.

pub mod report;
mod standing;

pub use standing::StandingGrant;

use crate::approval::ApprovalStatus;
use crate::canonical::ToolCall;
use crate::gatekeeper::evaluate_in;
use crate::policy::Registry;
use crate::risk::RiskTier;
use crate::session_risk::{Mark, SessionRisk};
use crate::transitions;
use crate::triggers::window::{Folded, WindowNeeds, add_cost, compact};
use crate::triggers::{Observations, PriorCall, lexical_only};
use crate::verdict::{Reason, Verdict, VerdictKind};
use report::{Report, ReportBuilder};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The built-in rule name of a plan or tool-review block ([`transitions::apply_block`]).
pub const BLOCK_RULE: &str = "mplp plan";

/// What happened to a recorded proposal at the time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Was {
    /// Allowed outright (`call.allowed`).
    Allowed,
    /// Denied outright (`call.denied`); `blocked` when the denial was a plan or tool-review
    /// block rather than the policy.
    Denied {
        /// A plan or tool-review block denied it ([`BLOCK_RULE`]).
        blocked: bool,
    },
    /// Confirm, covered by a grant: approved without a prompt (`grant.used`).
    Granted,
    /// Held for a person (`approval.requested`), and what became of it.
    Held {
        /// The approval's status now.
        status: ApprovalStatus,
        /// Who settled it (a principal name, `system:expiry`, …), when someone did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_by: Option<String>,
        /// Unix ms of the settling decision.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_at_ms: Option<i64>,
        /// An operator edited the call before deciding (what was approved is not the call as
        /// proposed).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        edited: bool,
    },
}

impl Was {
    /// The verdict then: allow, deny, or confirm (granted or held).
    pub fn kind(&self) -> VerdictKind {
        match self {
            Was::Allowed => VerdictKind::Allow,
            Was::Denied { .. } => VerdictKind::Deny,
            Was::Granted | Was::Held { .. } => VerdictKind::Confirm,
        }
    }

    /// Whether a person was asked (a held call; a granted one was not).
    pub fn prompted(&self) -> bool {
        matches!(self, Was::Held { .. })
    }

    /// Whether it counted toward later thresholds of its session (allowed, granted, pending or
    /// approved; not denied, rejected, cancelled or expired).
    pub fn counts(&self) -> bool {
        match self {
            Was::Allowed | Was::Granted => true,
            Was::Denied { .. } => false,
            Was::Held { status, .. } => {
                matches!(status, ApprovalStatus::Pending | ApprovalStatus::Approved)
            }
        }
    }

    /// Whether it ran (or may have: allowed, granted, approved) and so marked its session with
    /// what its tool brings in (issue 16 §3).
    pub fn ran(&self) -> bool {
        matches!(
            self,
            Was::Allowed
                | Was::Granted
                | Was::Held {
                    status: ApprovalStatus::Approved,
                    ..
                }
        )
    }

    /// Whether nobody consented to the call as proposed: denied by the policy (not a block),
    /// rejected by a person (not by the expiry default), or approved only after an operator
    /// edited it.
    pub fn refused(&self) -> bool {
        match self {
            Was::Denied { blocked } => !blocked,
            Was::Held {
                status: ApprovalStatus::Rejected,
                decided_by,
                ..
            } => decided_by.as_deref() != Some("system:expiry"),
            Was::Held {
                status: ApprovalStatus::Approved,
                edited,
                ..
            } => *edited,
            _ => false,
        }
    }

    /// `allowed`, `denied`, `blocked`, `granted`, or the held approval's status.
    pub fn label(&self) -> &'static str {
        match self {
            Was::Allowed => "allowed",
            Was::Denied { blocked: false } => "denied",
            Was::Denied { blocked: true } => "blocked",
            Was::Granted => "granted",
            Was::Held { status, .. } => status.as_str(),
        }
    }
}

/// One recorded proposal, as the audit log holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Audit sequence number of its record (the replay order).
    pub seq: i64,
    /// Unix ms of the proposal.
    pub at_ms: i64,
    /// The proposing agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// The call as proposed.
    pub call: ToolCall,
    /// The risk tier then.
    pub risk_tier: RiskTier,
    /// The reasons then.
    pub reasons: Vec<Reason>,
    /// What happened to it.
    pub was: Was,
    /// Unix ms at which the token of a held call a person approved was redeemed: when the
    /// live gateway marked its session with what the tool brings in (issue 16 §3); `None`
    /// for any other call, or when it was never redeemed (nor marked).
    pub redeemed_at_ms: Option<i64>,
}

/// How one call's verdict would change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The same kind of verdict.
    Unchanged,
    /// Allowed then, held now (a new prompt).
    AllowToConfirm,
    /// Held (or granted) then, allowed now (a prompt removed).
    ConfirmToAllow,
    /// Allowed or held then, denied now.
    ToDeny,
    /// Denied then, allowed now.
    DenyToAllow,
    /// Denied then, held now.
    DenyToConfirm,
}

impl Change {
    /// The change from `was` to `now`.
    pub fn of(was: VerdictKind, now: VerdictKind) -> Change {
        use VerdictKind::{Allow, Confirm, Deny};
        match (was, now) {
            (a, b) if a == b => Change::Unchanged,
            (_, Deny) => Change::ToDeny,
            (Allow, Confirm) => Change::AllowToConfirm,
            (Confirm, Allow) => Change::ConfirmToAllow,
            (Deny, Allow) => Change::DenyToAllow,
            (Deny, Confirm) => Change::DenyToConfirm,
            _ => Change::Unchanged,
        }
    }

    /// `allow→confirm`, … as the text report writes it.
    pub fn arrow(self) -> &'static str {
        match self {
            Change::Unchanged => "unchanged",
            Change::AllowToConfirm => "allow→confirm",
            Change::ConfirmToAllow => "confirm→allow",
            Change::ToDeny => "→deny",
            Change::DenyToAllow => "deny→allow",
            Change::DenyToConfirm => "deny→confirm",
        }
    }
}

/// One call replayed: the recorded proposal, the new verdict, and what changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed<'a> {
    /// The recorded proposal.
    pub recorded: &'a Recorded,
    /// The candidate policy's verdict.
    pub verdict: Verdict,
    /// Its kind against the recorded one.
    pub change: Change,
    /// Whether a person is asked now (a confirm that a grant would not cover).
    pub prompted: bool,
    /// Refused then (denied by the policy or rejected by a person), allowed outright now; or
    /// denied by the policy then, and held now for a person but covered by a grant standing
    /// now (`covered`).
    pub loosened: bool,
    /// A grant standing when the replay runs would stand in for the candidate's confirm.
    pub covered: bool,
}

/// Replay settings.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Examples kept per tool and change (the report's `examples`).
    pub examples_per_change: usize,
    /// Loosened calls listed (all are counted).
    pub loosened_listed: usize,
    /// Keep every replayed call in the report (`calls`), for a call-by-call comparison.
    pub keep_calls: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            examples_per_change: 3,
            loosened_listed: 100,
            keep_calls: false,
        }
    }
}

/// Whether `call` is a synthetic call of another entry point, not replayed: a Confirm target
/// (`mplp.*`) or a delegation (`delegate.*`), which the gateway makes without a server — a
/// local tool cannot be so named (Agent Format aliases have no dot), so an MCP tool that is
/// (it has a server) is replayed like any other —, or a held result (`result.*`).
pub fn synthetic(call: &ToolCall) -> bool {
    let local = call.server.is_none();
    let t = &call.tool;
    (local && (t.starts_with("mplp.") || t.starts_with("delegate."))) || t.starts_with("result.")
}

/// The newest calls of each tool and server a session keeps for the rate thresholds of
/// `reg`: the largest `thresholds.rate.max` (at least 1). Exact: a rate counts the calls its
/// rule covers in its window, and a tool with at least that many in it passes every rate's
/// `max` kept or not, so only the count in its message may read lower; with an agent-wide
/// threshold, one past [`crate::triggers::window::AGENT_CALLS_CAP`]. Found by review: the
/// replay copied every counting call of the session's longest window for every call, so
/// 50,000 cheap calls of one session in a day's window made some 10⁹ copies in one replay
/// (minutes of an insights page, hours of `POST /v1/policies/replay`).
fn rate_cap(reg: &Registry) -> usize {
    let rules = reg.policies().values().flat_map(|p| &p.rules);
    let maxes = rules.filter_map(|r| r.thresholds.rate.as_ref().map(|r| r.max));
    let largest = maxes.max().unwrap_or(0);
    let cap = usize::try_from(largest).unwrap_or(usize::MAX).max(1);
    // With an agent-wide threshold, a call is held when the agent's calls are too many to
    // count (`AGENT_CALLS_CAP`; the replay counts a session's): keep one past it (found by
    // review of this cap).
    match WindowNeeds::of(reg).longest_agent_seconds {
        Some(_) => cap.max(crate::triggers::window::AGENT_CALLS_CAP + 1),
        None => cap,
    }
}

/// What the candidate's thresholds need of one session's earlier counting calls.
#[derive(Default)]
struct Session {
    /// Cost totals per tool and server, over every counting call.
    folded: Vec<Folded>,
    /// The times of the counting calls inside the longest rate window, per tool and server,
    /// oldest first: at most the largest rate's `max` of each ([`rate_cap`]).
    recent: BTreeMap<(String, Option<String>), VecDeque<i64>>,
    /// What the session had taken in, under the candidate's effects.
    risk: SessionRisk,
    /// Held calls approved and redeemed after their proposal: `(redeemed at, agent, tool,
    /// server)`, marked once the replay reaches that time.
    redeemed: Vec<(i64, String, String, Option<String>)>,
}

impl Session {
    /// The short list standing for the whole session at `now_ms` ([`compact`]).
    fn prior(&mut self, needs: &WindowNeeds, now_ms: i64) -> Vec<PriorCall> {
        match needs.rate_since(now_ms) {
            Some(since) => self.recent.retain(|_, at| {
                while at.front().is_some_and(|&t| t <= since) {
                    at.pop_front();
                }
                !at.is_empty()
            }),
            None => self.recent.clear(),
        }
        let mut recent: Vec<PriorCall> = self
            .recent
            .iter()
            .flat_map(|((tool, server), at)| {
                at.iter().map(|&at_ms| PriorCall {
                    tool: tool.clone(),
                    server: server.clone(),
                    at_ms,
                    arguments: serde_json::Value::Null,
                })
            })
            .collect();
        recent.sort_by_key(|c| c.at_ms);
        compact(&self.folded, recent, vec![])
    }

    /// Marks, in order, the held calls whose tokens were redeemed at or before `now_ms`.
    fn mark_redeemed(&mut self, reg: &Registry, now_ms: i64) {
        if self.redeemed.iter().all(|r| r.0 > now_ms) {
            return;
        }
        self.redeemed.sort_by_key(|r| r.0);
        let due = self.redeemed.partition_point(|r| r.0 <= now_ms);
        let due: Vec<_> = self.redeemed.drain(..due).collect();
        for (at, agent, tool, server) in due {
            self.mark(reg, &agent, (&tool, server.as_deref()), at);
        }
    }

    /// Marks what a call of `agent` to `tool` (name, server) that ran at `at_ms` brought into
    /// the session (its effects under `reg`): the session begins, and the first untrusted
    /// output, private data and egress stay.
    fn mark(&mut self, reg: &Registry, agent: &str, tool: (&str, Option<&str>), at_ms: i64) {
        let e = reg.effects_of(agent, tool.0, tool.1);
        let risk = &mut self.risk;
        risk.began_ms.get_or_insert(at_ms);
        let mark = || Mark {
            tool: tool.0.to_string(),
            server: tool.1.map(str::to_string),
            at_ms,
        };
        for (on, slot) in [
            (e.untrusted_output, &mut risk.untrusted),
            (e.private_data, &mut risk.private_data),
            (e.egress, &mut risk.egress),
        ] {
            if on && slot.is_none() {
                *slot = Some(mark());
            }
        }
    }

    /// Adds a counting call.
    fn add(&mut self, (needs, cap): (&WindowNeeds, usize), rec: &Recorded) {
        let call = &rec.call;
        if needs.longest_rate_seconds.is_some() {
            let key = (call.tool.clone(), call.server.clone());
            let at = self.recent.entry(key).or_default();
            at.push_back(rec.at_ms);
            if at.len() > cap {
                at.pop_front();
            }
        }
        if needs.cost_arguments.is_empty() {
            return;
        }
        let at = self
            .folded
            .iter()
            .position(|f| f.tool == call.tool && f.server == call.server);
        let f = match at {
            Some(i) => &mut self.folded[i],
            None => {
                self.folded.push(Folded {
                    tool: call.tool.clone(),
                    server: call.server.clone(),
                    totals: needs
                        .cost_arguments
                        .iter()
                        .map(|a| (a.clone(), 0.0))
                        .collect(),
                });
                self.folded.last_mut().expect("pushed")
            }
        };
        for (arg, total) in &mut f.totals {
            *total = add_cost(*total, &call.arguments, arg);
        }
    }
}

/// Replays recorded proposals, pushed in recorded order, under one candidate registry.
pub struct Replayer<'r> {
    reg: &'r Registry,
    /// What the registry's thresholds need of a session.
    needs: WindowNeeds,
    /// How many of a tool's calls a session keeps for the rate thresholds ([`rate_cap`]).
    rate_cap: usize,
    /// Each (agent, session)'s earlier counting calls, as the thresholds need them.
    sessions: HashMap<(String, String), Session>,
    report: ReportBuilder,
    /// The grants standing when the replay runs.
    standing: standing::Standing,
}

impl<'r> Replayer<'r> {
    /// A replayer of `reg` with `opts`.
    pub fn new(reg: &'r Registry, opts: Options) -> Self {
        Replayer {
            reg,
            needs: WindowNeeds::of(reg),
            rate_cap: rate_cap(reg),
            sessions: HashMap::new(),
            report: ReportBuilder::new(opts),
            standing: standing::Standing::default(),
        }
    }

    /// This replayer with the grants standing at `at_ms` (Unix ms: now, when the candidate
    /// would be put in force beside them): a confirm one of them covers asks no one, and a call
    /// refused then that it covers is loosened ([`classify`]).
    pub fn with_standing_grants(mut self, grants: Vec<StandingGrant>, at_ms: i64) -> Self {
        self.standing = standing::Standing::new(grants, at_ms);
        self
    }

    /// Evaluates `rec` under the candidate registry with its session's earlier calls, and adds
    /// it to the report. A synthetic call is counted as not replayed.
    pub fn push(&mut self, rec: &Recorded) {
        self.push_classified(rec);
    }

    /// [`Replayer::push`], giving back how the call's verdict changed (`None` for a synthetic
    /// call, not replayed).
    pub fn push_classified(&mut self, rec: &Recorded) -> Option<Change> {
        if synthetic(&rec.call) {
            self.report.skip();
            return None;
        }
        let key = (rec.agent.clone(), rec.session_id.clone());
        let session = self.sessions.entry(key).or_default();
        session.mark_redeemed(self.reg, rec.at_ms);
        let prior = session.prior(&self.needs, rec.at_ms);
        let verdict = evaluate_recorded(self.reg, rec, &prior, &session.risk);
        if rec.was.counts() {
            session.add((&self.needs, self.rate_cap), rec);
        }
        // As the live gateway marks a session: an allowed or granted call as it is proposed,
        // a held one when its token is redeemed (found by review: marking an approved call at
        // its proposal held, in the replay, a later call the live gateway under the candidate
        // would have let run — a loosening the CI gate then missed).
        let tool = (rec.call.tool.as_str(), rec.call.server.as_deref());
        match (&rec.was, rec.redeemed_at_ms) {
            (Was::Allowed | Was::Granted, _) => session.mark(self.reg, &rec.agent, tool, rec.at_ms),
            (Was::Held { .. }, Some(at)) if rec.was.ran() => {
                let (name, server) = (tool.0.to_string(), tool.1.map(str::to_string));
                session.redeemed.push((at, rec.agent.clone(), name, server));
            }
            _ => {}
        }
        let ids = (rec.agent.as_str(), rec.session_id.as_str());
        let covered_since = self.standing.covers(ids, &rec.call, &verdict);
        let replayed = classify(rec, verdict, covered_since);
        self.report.add(&replayed);
        Some(replayed.change)
    }

    /// The report of everything pushed.
    pub fn finish(self) -> Report {
        self.report.finish()
    }
}

/// The candidate's verdict for `rec`, given its session's earlier counting calls and what the
/// session had taken in: the gatekeeper with lexical path checks, and a block of the time
/// re-applied.
pub fn evaluate_recorded(
    reg: &Registry,
    rec: &Recorded,
    prior: &[PriorCall],
    session: &SessionRisk,
) -> Verdict {
    let obs = Observations {
        now_ms: rec.at_ms,
        prior_calls: prior,
        // A lower bound for `per: agent` thresholds: the replay reads sessions one by one.
        agent_calls: prior,
        session,
        resolve_path: &lexical_only,
    };
    let mut verdict = evaluate_in(reg, &rec.agent, &rec.call, None, &obs);
    if rec.was == (Was::Denied { blocked: true }) {
        let why = rec
            .reasons
            .iter()
            .rev()
            .find(|r| r.rule == BLOCK_RULE)
            .map_or_else(|| "blocked at the time".to_string(), |r| r.text.clone());
        transitions::apply_block(&mut verdict, Some(why));
    }
    verdict
}

/// `rec` and its new `verdict`, classified; `covered_since`: a grant standing now, made at that
/// Unix ms, would stand in for the verdict's confirm ([`Replayer::with_standing_grants`]), so
/// it asks no one. A refused call it covers is loosened as by an allow when the policy denied
/// it then, or when the grant stood already as it was held (its terms then kept the grant
/// from it, the candidate's do not: found by review). One refused before the grant was made
/// was a confirm the grant may cover under the policy in force too: that is the grant's doing,
/// not the candidate's, and it is shown (`covered_by_grant`), not counted.
pub fn classify(rec: &Recorded, verdict: Verdict, covered_since: Option<i64>) -> Replayed<'_> {
    let change = Change::of(rec.was.kind(), verdict.kind);
    let granted_again =
        rec.was == Was::Granted && crate::grant::may_use_grant(&verdict.terms, false);
    let covered = covered_since.is_some();
    let prompted = verdict.kind == VerdictKind::Confirm && !granted_again && !covered;
    let denied_then = matches!(rec.was, Was::Denied { .. });
    let candidates_doing = covered_since.is_some_and(|made| denied_then || made <= rec.at_ms);
    let loosened = rec.was.refused() && (verdict.kind == VerdictKind::Allow || candidates_doing);
    Replayed {
        recorded: rec,
        verdict,
        change,
        prompted,
        loosened,
        covered,
    }
}

/// Replays `history` (in recorded order) under `reg` in one go.
pub fn replay<'h>(
    reg: &Registry,
    history: impl IntoIterator<Item = &'h Recorded>,
    opts: Options,
) -> Report {
    let mut r = Replayer::new(reg, opts);
    for rec in history {
        r.push(rec);
    }
    r.finish()
}

#[cfg(test)]
mod tests;
