//! The replay report (issue 16 §1): counts per tool and overall, prompts before and after,
//! examples per tool and change with the rules responsible, the loosened calls, and — when
//! asked — every call. Serialised as the body of `assent replay --json` and
//! `POST /v1/policies/replay` (times RFC 3339 on the wire).

use super::{Change, Options, Replayed};
use crate::redact::Redactor;
use crate::risk::RiskTier;
use crate::stamp;
use crate::verdict::{Reason, VerdictKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Examples a report keeps at the most, over every tool (agents name tools freely).
pub const MAX_EXAMPLES: usize = 300;

/// Tools counted apart in [`Report::by_tool`] at the most: calls of a tool first seen after
/// that many are counted under [`OTHER_TOOLS`] (found by review: an agent calling a new made-up
/// tool name each time grew the report, and the response, without bound).
pub const MAX_TOOLS: usize = 1_000;

/// The [`Report::by_tool`] key the calls of tools past [`MAX_TOOLS`] are counted under.
pub const OTHER_TOOLS: &str = "(other tools)";

/// How many calls changed, and how, over some set of calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Counts {
    /// Calls replayed.
    pub calls: u64,
    /// The same kind of verdict.
    pub unchanged: u64,
    /// Allowed then, held now.
    pub allow_to_confirm: u64,
    /// Held or granted then, allowed now.
    pub confirm_to_allow: u64,
    /// Allowed or held then, denied now.
    pub to_deny: u64,
    /// Denied then, allowed now.
    pub deny_to_allow: u64,
    /// Denied then, held now.
    pub deny_to_confirm: u64,
    /// Calls a person was asked about then.
    pub prompts_before: u64,
    /// Calls a person would be asked about now.
    pub prompts_after: u64,
    /// Calls whose risk tier would change.
    pub tier_changed: u64,
    /// Calls refused then (denied by the policy, rejected by a person) that would now be
    /// allowed outright.
    pub loosened: u64,
}

impl Counts {
    fn add(&mut self, r: &Replayed<'_>) {
        self.calls += 1;
        *match r.change {
            Change::Unchanged => &mut self.unchanged,
            Change::AllowToConfirm => &mut self.allow_to_confirm,
            Change::ConfirmToAllow => &mut self.confirm_to_allow,
            Change::ToDeny => &mut self.to_deny,
            Change::DenyToAllow => &mut self.deny_to_allow,
            Change::DenyToConfirm => &mut self.deny_to_confirm,
        } += 1;
        self.prompts_before += u64::from(r.recorded.was.prompted());
        self.prompts_after += u64::from(r.prompted);
        self.tier_changed += u64::from(r.recorded.risk_tier != r.verdict.terms.risk_tier);
        self.loosened += u64::from(r.loosened);
    }
}

/// One replayed call, as an example or in the full list: what it was, what it would be, and
/// the rules responsible (reasons the candidate adds, and reasons it no longer gives).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Example {
    /// Audit sequence number of the recorded proposal.
    pub seq: i64,
    /// When it was proposed (Unix ms; RFC 3339 on the wire).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    #[serde(with = "stamp::ms_as_rfc3339")]
    pub at: i64,
    /// The agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// The tool.
    pub tool: String,
    /// Its MCP server alias, if any.
    pub server: Option<String>,
    /// The arguments, with the candidate's `redact` paths masked.
    pub arguments: Value,
    /// The verdict then.
    pub was: VerdictKind,
    /// What happened then: `allowed`, `denied`, `blocked`, `granted`, or the approval's status.
    pub outcome: String,
    /// The candidate's verdict.
    pub now: VerdictKind,
    /// The change.
    pub change: Change,
    /// The risk tier then.
    pub risk_tier_was: RiskTier,
    /// The candidate's risk tier.
    pub risk_tier_now: RiskTier,
    /// Whether a person would be asked now.
    pub prompted: bool,
    /// Refused then, allowed outright now (or covered by a grant standing now).
    pub loosened: bool,
    /// A grant standing when the replay ran would stand in for the candidate's confirm: no one
    /// would be asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub covered_by_grant: bool,
    /// Reasons the candidate gives that the recorded verdict did not (by file and rule).
    pub added_reasons: Vec<Reason>,
    /// Reasons the recorded verdict gave that the candidate does not.
    pub removed_reasons: Vec<Reason>,
}

impl Example {
    fn of(r: &Replayed<'_>) -> Example {
        let rec = r.recorded;
        let same = |a: &Reason, b: &Reason| a.file == b.file && a.rule == b.rule;
        let added = r.verdict.terms.reasons.iter();
        let added_reasons: Vec<Reason> = added
            .filter(|n| !rec.reasons.iter().any(|o| same(n, o)))
            .cloned()
            .collect();
        let removed_reasons: Vec<Reason> = rec
            .reasons
            .iter()
            .filter(|o| !r.verdict.terms.reasons.iter().any(|n| same(n, o)))
            .cloned()
            .collect();
        let redactor = Redactor::new(&rec.call.arguments, &r.verdict.terms.redact);
        let masked = |rs: Vec<Reason>| -> Vec<Reason> {
            rs.into_iter()
                .map(|x| Reason {
                    text: redactor.text(&x.text),
                    ..x
                })
                .collect()
        };
        let (added_reasons, removed_reasons) = (masked(added_reasons), masked(removed_reasons));
        Example {
            seq: rec.seq,
            at: rec.at_ms,
            agent: rec.agent.clone(),
            session_id: rec.session_id.clone(),
            tool: rec.call.tool.clone(),
            server: rec.call.server.clone(),
            arguments: redactor.arguments(&rec.call.arguments),
            was: rec.was.kind(),
            outcome: rec.was.label().to_string(),
            now: r.verdict.kind,
            change: r.change,
            risk_tier_was: rec.risk_tier,
            risk_tier_now: r.verdict.terms.risk_tier,
            prompted: r.prompted,
            loosened: r.loosened,
            covered_by_grant: r.covered,
            added_reasons,
            removed_reasons,
        }
    }
}

/// What a candidate policy would have done to the recorded history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Report {
    /// Every replayed call.
    pub overall: Counts,
    /// Synthetic calls (Confirm targets, delegations, held results) not replayed.
    pub not_replayed: u64,
    /// First and last proposal replayed (Unix ms; RFC 3339 on the wire), `null` when none.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    #[serde(with = "stamp::opt_ms_as_rfc3339")]
    pub first: Option<i64>,
    /// See `first`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    #[serde(with = "stamp::opt_ms_as_rfc3339")]
    pub last: Option<i64>,
    /// Counts per tool, keyed `SERVER/TOOL` (or `TOOL` for a local tool); the first
    /// [`MAX_TOOLS`] tools seen, then [`OTHER_TOOLS`] for the rest.
    pub by_tool: BTreeMap<String, Counts>,
    /// Up to `examples_per_change` examples per tool and change (unchanged calls none).
    pub examples: Vec<Example>,
    /// The loosened calls (up to `loosened_listed`; `overall.loosened` counts them all).
    pub loosened: Vec<Example>,
    /// Every replayed call, when asked for (`Options::keep_calls`); else empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<Example>,
}

impl Report {
    /// Prompts removed (positive) or added (negative) by the candidate.
    pub fn prompts_removed(&self) -> i64 {
        let (b, a) = (self.overall.prompts_before, self.overall.prompts_after);
        i64::try_from(b).unwrap_or(i64::MAX) - i64::try_from(a).unwrap_or(i64::MAX)
    }
}

/// Builds a [`Report`] one replayed call at a time.
pub(super) struct ReportBuilder {
    opts: Options,
    report: Report,
    /// Examples kept so far per (tool key, change).
    kept: BTreeMap<(String, Change), usize>,
}

impl ReportBuilder {
    pub(super) fn new(opts: Options) -> Self {
        ReportBuilder {
            opts,
            report: Report::default(),
            kept: BTreeMap::new(),
        }
    }

    pub(super) fn skip(&mut self) {
        self.report.not_replayed += 1;
    }

    pub(super) fn add(&mut self, r: &Replayed<'_>) {
        let rec = r.recorded;
        let key = match &rec.call.server {
            Some(s) => format!("{s}/{}", rec.call.tool),
            None => rec.call.tool.clone(),
        };
        let rep = &mut self.report;
        rep.overall.add(r);
        rep.first = Some(rep.first.map_or(rec.at_ms, |f| f.min(rec.at_ms)));
        rep.last = Some(rep.last.map_or(rec.at_ms, |l| l.max(rec.at_ms)));
        if r.loosened && rep.loosened.len() < self.opts.loosened_listed {
            rep.loosened.push(Example::of(r));
        }
        if self.opts.keep_calls {
            rep.calls.push(Example::of(r));
        }
        if r.change != Change::Unchanged && rep.examples.len() < MAX_EXAMPLES {
            let kept = self.kept.entry((key.clone(), r.change)).or_default();
            if *kept < self.opts.examples_per_change {
                *kept += 1;
                rep.examples.push(Example::of(r));
            }
        }
        let key = if rep.by_tool.len() >= MAX_TOOLS && !rep.by_tool.contains_key(&key) {
            OTHER_TOOLS.to_string()
        } else {
            key
        };
        rep.by_tool.entry(key).or_default().add(r);
    }

    pub(super) fn finish(self) -> Report {
        self.report
    }
}
