//! Grant rules (seed 002 "Approve with scope"): when a grant may stand in for a person's
//! consent, which stored grant covers a proposed call, and what a new grant binds (session,
//! exact call, expiry) for the scope a decision took. Pure functions the store calls inside
//! its transaction; storing, listing and revoking grants is the store's job. [`Grant`] is the
//! grant itself: the row the store reads back is the body `GET /v1/grants` lists.

use crate::approval::{GrantScope, millis};
use crate::risk::RiskTier;
use crate::stamp::{ms_as_rfc3339, opt_ms_as_rfc3339};
use serde::{Deserialize, Serialize};

/// One grant (seed 002 "Approve with scope"): later matching calls of the agent pass without
/// a prompt, each with its own single-use token. As stored (times in Unix milliseconds) and as
/// listed by `GET /v1/grants` (times as RFC 3339 text, see [`crate::stamp`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    /// Grant id, UUID v4 (`DELETE /v1/grants/{id}` revokes it).
    pub id: String,
    /// The agent it lets through.
    pub agent: String,
    /// For scope `session`: the session; else `null`.
    pub session_id: Option<String>,
    /// Tool name.
    pub tool: String,
    /// MCP server alias, `null` for a local tool.
    pub server: Option<String>,
    /// The call hash it covers; `null` when widened to the whole tool.
    pub call_hash: Option<String>,
    /// Whether it covers every call of the tool (`call_hash` is `null`).
    pub whole_tool: bool,
    /// `session`, a duration such as `15m`, or `workspace`.
    pub scope: String,
    /// Risk tier of the approval that created it (`R4` when the stored value is unreadable).
    pub risk_tier: RiskTier,
    /// `workspace` on an R3/R4 tool (allowed after explicit confirmation, discouraged).
    pub discouraged: bool,
    /// The approval it came from.
    pub approval_id: String,
    /// The operator who granted it.
    pub created_by: String,
    /// When it was created: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub created_at: i64,
    /// When it lapses: Unix milliseconds (RFC 3339 on the wire); `None` for `workspace` (and
    /// for a `session` grant stored before session grants lapsed).
    #[serde(with = "opt_ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub expires_at: Option<i64>,
    /// When it was revoked: Unix milliseconds (RFC 3339 on the wire); `None` while not.
    #[serde(with = "opt_ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub revoked_at: Option<i64>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
}

/// Whether a grant may let a confirm verdict with `terms` through at all: only when no
/// threshold or scope trigger fired (`triggers` empty), the call is a plain tool call (no MPLP
/// Confirm `target` such as a plan), the action is reversible — a grant never stands in for
/// the consent an irreversible call needs each time (seed 001) —, and the call needs neither a
/// passkey-signed approval nor a quorum (issue 14 §1, §4): a grant made while the rules asked
/// for less (before a reload) never stands in for what they ask now.
pub fn may_use_grant(terms: &crate::verdict::ApprovalTerms, has_target: bool) -> bool {
    terms.triggers.is_empty()
        && !has_target
        && !terms.irreversible
        && !terms.require_passkey
        && terms.quorum.is_none()
}

/// The default applied when an approval held under `terms` times out, given the default the
/// event carries (`configured`: the stored `default_decision` for the expiry sweep): `reject`
/// whenever a trigger fired (`triggers` non-empty: session risk, a threshold, scope, a held
/// result, an unevaluable `deny`) — such a call is held so a person decides, and a timeout is
/// nobody, as it is no grant ([`may_use_grant`]); found by review: a rule saying
/// `default_decision: approve` approved a call held only by a trigger at its timeout — else
/// [`crate::approval::default_at_timeout`] (irreversible, passkey, quorum). The store's sweep
/// applies it to a stored row, so one held before this rule is covered too.
pub fn default_on_timeout(
    terms: &crate::verdict::ApprovalTerms,
    configured: crate::approval::DefaultDecision,
) -> crate::approval::DefaultDecision {
    if !terms.triggers.is_empty() {
        return crate::approval::DefaultDecision::Reject;
    }
    crate::approval::default_at_timeout(
        terms.irreversible,
        terms.require_passkey,
        terms.quorum.as_ref(),
        configured,
    )
}

/// Whether a grant made by deciding an approval held under `origin` may stand in for a new call
/// whose verdict asks `new`: only when `origin` was at least as strict on every axis a joining
/// call is compared on ([`crate::join::covers`]: in-client, tier, irreversible, default,
/// separation of duties, passkey, triggers, result limit, redaction) and on who may decide
/// when: every role that could decide `origin` — its first approvers from the start, a role an
/// escalation step adds from that step on — may decide the new call as early (`when_roles`).
/// `origin.approvers` is as stored (widened by the steps taken, `taken`: the roles they named);
/// its first approvers and step times come from its stored schedule (`origin_schedule`: the
/// schedule and when it was held, Unix ms), the new call's from its rules with its first wait
/// `new_wait_ms` (an `on_timeout` step happens then). A grant its escalated approvers made
/// still covers the same rules' calls. An origin whose steps were taken but whose schedule
/// does not record its first approvers (stored before they were) never covers: the widened
/// list cannot tell a role a step added from a first one the step named again (found by
/// review: read as added, a role that could decide from the start counted as a later one).
/// `Err` names the first weaker axis.
///
/// Found by review: a grant from `approvers: [ops]` kept covering calls after a reload asked
/// for `[security]` with separation of duties, or a higher tier; and, compared as "anyone at
/// any step" (or with an `on_timeout` step as "never"), one kept covering calls a reload gave
/// to `[cfo]` alone for a day before `ops`.
pub fn origin_covers(
    origin: &crate::verdict::ApprovalTerms,
    taken: &[String],
    origin_schedule: Option<(&crate::escalation::Schedule, i64)>,
    new: &crate::verdict::ApprovalTerms,
    new_wait_ms: i64,
) -> Result<(), crate::join::Weaker> {
    use crate::join::{Held, Weaker, covers};
    let first = match origin_schedule {
        None => &origin.approvers,
        Some(_) if taken.is_empty() => &origin.approvers,
        Some((s, _)) => s.first_approvers.as_ref().ok_or(Weaker::Approvers)?,
    };
    let (steps, raised) = origin_schedule.map_or((&[][..], 0), |(s, r)| (&s.steps[..], r));
    let before = when_roles(first, steps, raised);
    let now = new
        .escalation
        .as_ref()
        .and_then(|e| crate::escalation::schedule(e, 0, new_wait_ms));
    let now = when_roles(
        &new.approvers,
        now.as_ref().map_or(&[][..], |s| &s.steps),
        0,
    );
    if !decides_as_early(&before, &now) {
        return Err(Weaker::Approvers);
    }
    // The approvers are compared above (a settled approval has no "now"): the other axes as
    // for a joining call.
    let rest = crate::verdict::ApprovalTerms {
        approvers: new.approvers.clone(),
        ..origin.clone()
    };
    let held = Held {
        terms: &rest,
        quorum: None,
        later: &[],
    };
    covers(&held, new)
}

/// Why a grant made by `creator` (its `created_by`, with what separation of duties knows of
/// them: [`crate::duties::Decider`]) may not stand in for a call of `agent` acting for
/// `on_behalf_of` whose verdict asks `terms`: under `separation_of_duties` the creator could
/// not approve that call themselves ([`crate::duties::self_approval`]: they own the agent, or
/// the call acts for them). `None`: the grant may cover it (as far as who made it goes).
///
/// Found by review: carol approved a call made for bob with scope `15m`; the agent then made
/// the same call for carol and her grant covered it — in effect carol approved her own call.
pub fn creator_conflict(
    terms: &crate::verdict::ApprovalTerms,
    agent: &str,
    on_behalf_of: Option<&str>,
    creator: &crate::duties::Decider<'_>,
) -> Option<String> {
    use crate::approval::DecisionKind;
    let sod = terms.separation_of_duties;
    crate::duties::self_approval(sod, DecisionKind::Approve, agent, on_behalf_of, creator)
        .map(|why| format!("the grant's creator may not approve this call: {why}"))
}

/// When each role may decide, in milliseconds after the call was held: the `first` approvers
/// from 0, a role a step of `steps` (times in Unix ms, the call held at `raised`) adds from
/// that step. `None`: any operator from the start (no first approvers).
fn when_roles(
    first: &[String],
    steps: &[crate::escalation::ScheduledStep],
    raised: i64,
) -> Option<std::collections::BTreeMap<String, i64>> {
    if first.is_empty() {
        return None;
    }
    let mut at: std::collections::BTreeMap<String, i64> =
        first.iter().map(|r| (r.clone(), 0)).collect();
    for step in steps {
        let t = step.at.saturating_sub(raised);
        for r in &step.approvers {
            let e = at.entry(r.clone()).or_insert(t);
            *e = (*e).min(t);
        }
    }
    Some(at)
}

/// Whether everyone `before` admits (a role from a time) `now` admits as early.
fn decides_as_early(
    before: &Option<std::collections::BTreeMap<String, i64>>,
    now: &Option<std::collections::BTreeMap<String, i64>>,
) -> bool {
    match (before, now) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(b), Some(n)) => b.iter().all(|(r, t)| n.get(r).is_some_and(|m| m <= t)),
    }
}

/// A stored grant, as far as coverage is concerned.
#[derive(Debug, Clone, Copy)]
pub struct GrantView<'a> {
    /// The agent it lets through.
    pub agent: &'a str,
    /// For scope `session`: the session; `None` for any.
    pub session_id: Option<&'a str>,
    /// Tool name.
    pub tool: &'a str,
    /// MCP server alias; `None` for a local tool.
    pub server: Option<&'a str>,
    /// The call hash it covers; `None` when widened to the whole tool.
    pub call_hash: Option<&'a str>,
    /// Unix milliseconds; `None` for no expiry.
    pub expires_at: Option<i64>,
    /// When it was made, Unix milliseconds: a `session` grant stored without an expiry (made
    /// before session grants lapsed) lapses [`DEFAULT_SESSION_GRANT_MAX_MS`] after it.
    pub created_at: i64,
    /// Whether it was revoked.
    pub revoked: bool,
}

/// A proposed call, as far as coverage is concerned.
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    /// The proposing agent.
    pub agent: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// Tool name.
    pub tool: &'a str,
    /// MCP server alias; `None` for a local tool.
    pub server: Option<&'a str>,
    /// The call's `call_hash`.
    pub call_hash: &'a str,
    /// Unix milliseconds.
    pub now: i64,
}

/// Whether grant `g` covers call `c`: same agent, tool and server; same call hash unless the
/// grant was widened to the whole tool; same session for a `session` grant; not revoked and
/// not expired at `c.now` (a grant expiring exactly now no longer covers). A `session` grant
/// stored without an expiry (made before session grants lapsed: the agent names its session,
/// so it covered that session id for ever) lapses [`DEFAULT_SESSION_GRANT_MAX_MS`] after its
/// `created_at`.
pub fn covers(g: &GrantView<'_>, c: &CallView<'_>) -> bool {
    let lapses = g.expires_at.or_else(|| {
        g.session_id
            .map(|_| g.created_at.saturating_add(DEFAULT_SESSION_GRANT_MAX_MS))
    });
    g.agent == c.agent
        && g.tool == c.tool
        && g.server == c.server
        && !g.revoked
        && lapses.is_none_or(|e| e > c.now)
        && g.session_id.is_none_or(|s| s == c.session_id)
        && g.call_hash.is_none_or(|h| h == c.call_hash)
}

/// What a new grant binds, from the decided scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantTerms {
    /// Only calls of the approval's session (scope `session`).
    pub session_bound: bool,
    /// Only calls with the approved call's hash (not widened with `whole_tool`).
    pub exact_call: bool,
    /// Unix milliseconds it expires (a duration scope, or `session` after its maximum),
    /// saturating; `None` for none (`workspace`).
    pub expires_at: Option<i64>,
}

/// The longest life of a `session` grant when the configuration names none
/// (`session_grant_max_seconds`, default 24 h), in milliseconds.
pub const DEFAULT_SESSION_GRANT_MAX_MS: i64 = 24 * 3_600_000;

/// The terms of the grant a decision with `scope` (and `whole_tool`) creates at `now` (Unix
/// ms); `None` for scope `once`, which creates no grant. A `session` grant lapses
/// `session_max_ms` after `now` (saturating; a negative maximum counts as 0, so the grant
/// covers nothing): the agent names its session itself, so without a bound an agent keeping
/// one session id turned "this session" into "forever" (found by review). A duration scope
/// lapses after its duration; `workspace` never (until revoked).
pub fn terms(
    scope: GrantScope,
    whole_tool: bool,
    now: i64,
    session_max_ms: i64,
) -> Option<GrantTerms> {
    if !scope.is_grant() {
        return None;
    }
    Some(GrantTerms {
        session_bound: scope == GrantScope::Session,
        exact_call: !whole_tool,
        expires_at: match scope {
            GrantScope::Duration(s) => Some(now.saturating_add(millis(s))),
            GrantScope::Session => Some(now.saturating_add(session_max_ms.max(0))),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(r: &[&str]) -> Vec<String> {
        r.iter().map(|r| r.to_string()).collect()
    }

    /// Review finding: the first approvers were read back from the widened list, and a step
    /// that named a first role again was taken for adding it, so an origin `lead` could decide
    /// from the start passed for one where `lead` joined an hour in. They are now read from the
    /// schedule the store recorded; an origin whose steps were taken without that record never
    /// covers.
    #[test]
    fn an_origins_first_approvers_are_the_recorded_ones_not_a_guess_from_the_widened_list() {
        use crate::escalation::{Escalation, EscalationStep, schedule};
        let terms = |first: &[&str], step: Option<&str>| {
            let mut t =
                crate::verdict::ApprovalTerms::plain(String::new(), vec![], crate::RiskTier::R2);
            t.approvers = roles(first);
            t.escalation = step.map(|r| Escalation {
                steps: vec![EscalationStep {
                    after_seconds: Some(3600),
                    approvers: roles(&[r]),
                }],
                last_wait_seconds: None,
            });
            t
        };
        // The new call: `ops` from the start, `lead` an hour in.
        let new = terms(&["ops"], Some("lead"));
        let held = |first: &[&str], recorded: Option<&[&str]>| {
            let t = terms(first, Some("lead"));
            let mut s = schedule(t.escalation.as_ref().unwrap(), 0, 7_200_000).unwrap();
            s.first_approvers = recorded.map(roles);
            // Stored after the step: the approvers widened to `[ops, lead]` either way.
            let stored = crate::verdict::ApprovalTerms {
                approvers: roles(&["ops", "lead"]),
                ..t
            };
            (stored, s)
        };
        let taken = roles(&["lead"]);
        let covers =
            |(stored, s): &(crate::verdict::ApprovalTerms, crate::escalation::Schedule)| {
                origin_covers(stored, &taken, Some((s, 0)), &new, 7_200_000)
            };
        // `lead` joined at the step: as strict as the new call.
        assert_eq!(covers(&held(&["ops"], Some(&["ops"]))), Ok(()));
        // `lead` could decide from the start (the step named it again): looser.
        assert_eq!(
            covers(&held(&["ops", "lead"], Some(&["ops", "lead"]))),
            Err(crate::join::Weaker::Approvers)
        );
        // Not recorded (stored before): cannot tell, never covers.
        assert_eq!(
            covers(&held(&["ops"], None)),
            Err(crate::join::Weaker::Approvers)
        );
        // No step taken: the stored approvers are the first ones.
        let (stored, s) = held(&["ops"], None);
        let stored = crate::verdict::ApprovalTerms {
            approvers: roles(&["ops"]),
            ..stored
        };
        assert_eq!(
            origin_covers(&stored, &[], Some((&s, 0)), &new, 7_200_000),
            Ok(())
        );
    }

    /// Review finding: a grant covered a call acting for the operator who granted it, or of
    /// an agent they own, under separation of duties. It no longer does; it still covers
    /// others' calls, and any call when the rules do not ask for separation of duties.
    #[test]
    fn a_grant_never_covers_a_call_its_creator_could_not_approve() {
        use crate::duties::Decider;
        let plain =
            crate::verdict::ApprovalTerms::plain(String::new(), vec![], crate::RiskTier::R2);
        let sod = crate::verdict::ApprovalTerms {
            separation_of_duties: true,
            ..plain.clone()
        };
        let aka = ["carol@example.com".to_string()];
        let carol = Decider {
            name: "oidc:carol@example.com",
            owns: &[],
            aka: &aka,
        };
        let owns = ["bot".to_string()];
        let owner = Decider {
            name: "dave",
            owns: &owns,
            aka: &[],
        };
        let conflict = |t, agent, who, d: &Decider<'_>| creator_conflict(t, agent, who, d);
        assert!(conflict(&sod, "bot", Some("Carol@Example.com"), &carol).is_some());
        assert!(conflict(&sod, "bot", Some("oidc:carol@example.com"), &carol).is_some());
        assert!(conflict(&sod, "bot", Some("bob"), &owner).is_some());
        assert!(conflict(&sod, "bot", None, &owner).is_some());
        // Others' calls, another agent, or no separation of duties asked: covered.
        assert_eq!(conflict(&sod, "bot", Some("bob"), &carol), None);
        assert_eq!(conflict(&sod, "bot", None, &carol), None);
        assert_eq!(conflict(&sod, "other", Some("bob"), &owner), None);
        assert_eq!(
            conflict(&plain, "bot", Some("carol@example.com"), &carol),
            None
        );
        assert_eq!(conflict(&plain, "bot", None, &owner), None);
    }

    const CALL: CallView<'static> = CallView {
        agent: "bot",
        session_id: "s1",
        tool: "pay",
        server: Some("bank"),
        call_hash: "h1",
        now: 1_000,
    };
    const GRANT: GrantView<'static> = GrantView {
        agent: "bot",
        session_id: None,
        tool: "pay",
        server: Some("bank"),
        call_hash: Some("h1"),
        expires_at: None,
        created_at: 0,
        revoked: false,
    };

    #[test]
    fn a_grant_never_replaces_consent_for_triggers_targets_or_irreversible_calls() {
        let plain =
            crate::verdict::ApprovalTerms::plain(String::new(), vec![], crate::RiskTier::R2);
        assert!(may_use_grant(&plain, false));
        let rated = crate::verdict::ApprovalTerms {
            triggers: vec!["rate".into()],
            ..plain.clone()
        };
        assert!(!may_use_grant(&rated, false));
        assert!(!may_use_grant(&plain, true));
        for terms in [
            crate::verdict::ApprovalTerms {
                irreversible: true,
                ..plain.clone()
            },
            crate::verdict::ApprovalTerms {
                require_passkey: true,
                ..plain.clone()
            },
            crate::verdict::ApprovalTerms {
                quorum: crate::quorum::parse_approvers(&serde_json::json!({"count": 2}))
                    .unwrap()
                    .quorum,
                ..plain.clone()
            },
        ] {
            assert!(!may_use_grant(&terms, false), "{terms:?}");
        }
    }

    /// What no grant covers for a trigger, no timeout approves either, whatever the stored
    /// default; without a trigger the stored default stands.
    #[test]
    fn a_timeout_never_approves_a_call_held_by_a_trigger() {
        use crate::approval::DefaultDecision::{Approve, Reject};
        let plain =
            crate::verdict::ApprovalTerms::plain(String::new(), vec![], crate::RiskTier::R2);
        assert_eq!(default_on_timeout(&plain, Approve), Approve);
        assert_eq!(default_on_timeout(&plain, Reject), Reject);
        for t in ["session_untrusted", "paths", "cost", "output_bytes"] {
            let held = crate::verdict::ApprovalTerms {
                triggers: vec![t.into()],
                ..plain.clone()
            };
            assert_eq!(default_on_timeout(&held, Approve), Reject, "{t}");
        }
    }

    #[test]
    fn coverage_matches_agent_tool_server_session_hash_and_time() {
        assert!(covers(&GRANT, &CALL));
        let no = |g: GrantView<'static>| assert!(!covers(&g, &CALL), "{g:?}");
        no(GrantView {
            agent: "other",
            ..GRANT
        });
        no(GrantView {
            tool: "refund",
            ..GRANT
        });
        no(GrantView {
            server: None,
            ..GRANT
        });
        no(GrantView {
            call_hash: Some("h2"),
            ..GRANT
        });
        no(GrantView {
            session_id: Some("s2"),
            ..GRANT
        });
        no(GrantView {
            revoked: true,
            ..GRANT
        });
        no(GrantView {
            expires_at: Some(1_000),
            ..GRANT
        });
        assert!(covers(
            &GrantView {
                expires_at: Some(1_001),
                ..GRANT
            },
            &CALL
        ));
        assert!(covers(
            &GrantView {
                session_id: Some("s1"),
                ..GRANT
            },
            &CALL
        ));
        assert!(covers(
            &GrantView {
                call_hash: None,
                ..GRANT
            },
            &CallView {
                call_hash: "h9",
                ..CALL
            }
        ));
        let local = CallView {
            server: None,
            ..CALL
        };
        assert!(covers(
            &GrantView {
                server: None,
                ..GRANT
            },
            &local
        ));
        assert!(!covers(&GRANT, &local));
    }

    #[test]
    fn terms_follow_the_scope() {
        const DAY: i64 = DEFAULT_SESSION_GRANT_MAX_MS;
        assert_eq!(terms(GrantScope::Once, false, 5, DAY), None);
        assert_eq!(
            terms(GrantScope::Session, false, 5, DAY),
            Some(GrantTerms {
                session_bound: true,
                exact_call: true,
                expires_at: Some(5 + DAY)
            })
        );
        assert_eq!(
            terms(GrantScope::Duration(900), true, 5, DAY),
            Some(GrantTerms {
                session_bound: false,
                exact_call: false,
                expires_at: Some(900_005)
            })
        );
        assert_eq!(
            terms(GrantScope::Workspace, false, 5, DAY).map(|t| t.expires_at),
            Some(None)
        );
        assert_eq!(
            terms(GrantScope::Duration(u64::MAX), false, 5, DAY).and_then(|t| t.expires_at),
            Some(i64::MAX)
        );
    }

    /// Review finding: a `session` grant had no expiry, and the agent picks its session id,
    /// so keeping one id made "this session" permanent. It now lapses at creation plus the
    /// configured maximum, saturating (no overflow at `i64::MAX`), and a negative maximum
    /// (never configured: bounded at load) makes a grant that covers nothing.
    #[test]
    fn a_session_grant_lapses_after_the_configured_maximum_without_overflow() {
        let at = |now, max| terms(GrantScope::Session, true, now, max).and_then(|t| t.expires_at);
        assert_eq!(at(1_000, 60_000), Some(61_000));
        assert_eq!(at(i64::MAX, 60_000), Some(i64::MAX));
        assert_eq!(at(i64::MAX - 1, i64::MAX), Some(i64::MAX));
        assert_eq!(at(1_000, -5), Some(1_000));
        // What it lapses at is what coverage checks: covered before, not at or after.
        let g = GrantView {
            session_id: Some("s1"),
            expires_at: at(0, 1_000),
            ..GRANT
        };
        assert!(covers(&g, &CallView { now: 999, ..CALL }));
        assert!(!covers(&g, &CallView { now: 1_000, ..CALL }));
        assert!(!covers(
            &g,
            &CallView {
                now: i64::MAX,
                ..CALL
            }
        ));
    }

    /// A session grant stored before session grants lapsed has no expiry: it lapses a day
    /// after it was made (an agent keeping its session id had it for ever); a workspace grant
    /// (no session) without an expiry still stands.
    #[test]
    fn a_session_grant_stored_without_an_expiry_lapses_a_day_after_it_was_made() {
        let old = GrantView {
            session_id: Some("s1"),
            created_at: 5_000,
            ..GRANT
        };
        let day = DEFAULT_SESSION_GRANT_MAX_MS;
        assert!(covers(
            &old,
            &CallView {
                now: 5_000 + day - 1,
                ..CALL
            }
        ));
        assert!(!covers(
            &old,
            &CallView {
                now: 5_000 + day,
                ..CALL
            }
        ));
        let late = GrantView {
            created_at: i64::MAX,
            ..old
        };
        assert!(covers(
            &late,
            &CallView {
                now: i64::MAX - 1,
                ..CALL
            }
        ));
        assert!(covers(
            &GRANT,
            &CallView {
                now: i64::MAX - 1,
                ..CALL
            }
        ));
    }
}
