//! Risk that follows the session (issue 16 §3): what a tool's calls do ([`Effects`], the
//! governance rule keys `untrusted_output`, `private_data`, `egress`, `writes`), what the
//! session has taken in so far ([`SessionRisk`], kept by the store), and how that raises the
//! risk of a later call ([`escalations`]):
//!
//! - after untrusted output entered the session, a call of an `egress` or `writes` tool is at
//!   least R3 (trigger `session_untrusted`);
//! - private data and egress in one session — private data already in and this call egress,
//!   or an egress call already run and this call bringing private data in — is R4 (the
//!   "lethal trifecta", trigger `lethal_trifecta`);
//! - a tool whose pinned definition changed after the session began is R4 in that session
//!   (trigger `tool_changed`);
//! - a session whose record holds a moment this gateway never writes (before 1970 or after
//!   9999, written behind the gateway's back) is unreadable: its every call is R4 (trigger
//!   `session_unreadable`). Found by review: formatting such a moment for a reason panicked
//!   inside the proposal's write transaction, which failed every proposal of its group commit.
//!
//! Everything here is pure; the gatekeeper applies it (it only raises: a deny stays a deny, a
//! tier is never lowered) and the triggers keep grants from standing in for a person.

use crate::risk::RiskTier;
use serde::{Deserialize, Serialize};
use std::time::{Duration, UNIX_EPOCH};

/// Trigger of a call of an egress or writes tool after untrusted output entered the session.
pub const TRIGGER_UNTRUSTED: &str = "session_untrusted";
/// Trigger of private data and egress in one session.
pub const TRIGGER_TRIFECTA: &str = "lethal_trifecta";
/// Trigger of a call of a tool whose pinned definition changed during the session.
pub const TRIGGER_TOOL_CHANGED: &str = "tool_changed";
/// Trigger of a call in a session whose record cannot be read ([`SessionRisk::damage`]).
pub const TRIGGER_UNREADABLE: &str = "session_unreadable";
/// The triggers of this module, as they appear in a verdict's `triggers`.
pub const TRIGGERS: [&str; 4] = [
    TRIGGER_UNTRUSTED,
    TRIGGER_TRIFECTA,
    TRIGGER_TOOL_CHANGED,
    TRIGGER_UNREADABLE,
];
/// The latest moment a session's record may hold, in Unix ms: 9999-12-31T23:59:59.999Z, the
/// last RFC 3339 can write. A later one (or one before 1970) was not written by this gateway.
pub const LATEST_MS: i64 = 253_402_300_799_999;

/// What the calls of a tool do, as the covering governance rules say: each is true when any
/// covering rule says so (an `irreversible: true` rule counts as `writes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// The result carries text an attacker may write (web fetch, email read, issue comments).
    pub untrusted_output: bool,
    /// The result carries private data.
    pub private_data: bool,
    /// The call sends data out (email send, HTTP POST, upload).
    pub egress: bool,
    /// The call changes state.
    pub writes: bool,
}

impl Effects {
    /// Each effect that either has.
    pub fn union(self, o: Effects) -> Effects {
        Effects {
            untrusted_output: self.untrusted_output || o.untrusted_output,
            private_data: self.private_data || o.private_data,
            egress: self.egress || o.egress,
            writes: self.writes || o.writes,
        }
    }

    /// Whether a call with these effects marks its session when it may run (it brings
    /// untrusted output or private data in, or sends data out).
    pub fn marks(&self) -> bool {
        self.untrusted_output || self.private_data || self.egress
    }
}

/// When something first entered a session, and through which tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The tool's name.
    pub tool: String,
    /// Its MCP server alias.
    pub server: Option<String>,
    /// Unix milliseconds.
    pub at_ms: i64,
}

/// A change of a tool's pinned definition (MCP tool-list pinning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolChange {
    /// MCP server alias.
    pub server: String,
    /// Tool name.
    pub tool: String,
    /// Unix milliseconds of the change (a review seen, a pin accepted).
    pub at_ms: i64,
    /// What happened, for the reason (`a new definition was accepted`, …).
    pub what: String,
}

/// What one agent session has taken in so far. [`SessionRisk::CLEAN`] is a session with
/// nothing in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionRisk {
    /// When the session began (its first call that may run), Unix ms; `None` before any did
    /// (it has seen no tool's definition at work, so no change counts).
    pub began_ms: Option<i64>,
    /// When untrusted output first entered it (a call of an `untrusted_output` tool may run).
    pub untrusted: Option<Mark>,
    /// When private data first entered it.
    pub private_data: Option<Mark>,
    /// When a call that sends data out first may have run in it.
    pub egress: Option<Mark>,
    /// Changes of pinned tool definitions the caller looked up (the store looks up the
    /// called tool's); only those after `began_ms` count.
    pub changed_tools: Vec<ToolChange>,
}

/// A clean session, to borrow for `'static` (a `const` with a `Vec` is not promoted).
pub static CLEAN_SESSION: SessionRisk = SessionRisk::CLEAN;

impl SessionRisk {
    /// A clean session (see also [`CLEAN_SESSION`]).
    pub const CLEAN: SessionRisk = SessionRisk {
        began_ms: None,
        untrusted: None,
        private_data: None,
        egress: None,
        changed_tools: Vec::new(),
    };
}

/// One reason to raise a call's risk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalated {
    /// The tier the call is raised to at least.
    pub tier: RiskTier,
    /// Its trigger (one of [`TRIGGERS`]).
    pub trigger: &'static str,
    /// Why, naming the cause.
    pub why: String,
}

/// Unix milliseconds as RFC 3339 (UTC, milliseconds, `2026-01-01T00:00:00.000Z`); `None`
/// before 1970 or after [`LATEST_MS`] (never a panic: `humantime` panics past year 9999).
pub fn rfc3339_ms(at_ms: i64) -> Option<String> {
    let ms = u64::try_from(at_ms).ok().filter(|_| at_ms <= LATEST_MS)?;
    let t = UNIX_EPOCH.checked_add(Duration::from_millis(ms))?;
    Some(humantime::format_rfc3339_millis(t).to_string())
}

/// [`rfc3339_ms`], or `an unreadable time (N ms)` for a moment it cannot write.
fn when(at_ms: i64) -> String {
    rfc3339_ms(at_ms).unwrap_or_else(|| format!("an unreadable time ({at_ms} ms)"))
}

impl SessionRisk {
    /// The first moment of the record outside 1970 to [`LATEST_MS`], named as its column
    /// (`began_at`, `untrusted_at`, `private_at`, `egress_at`, or the change of a tool's pinned
    /// definition) with its value; `None` when every moment is readable. Only a write behind
    /// the gateway's back leaves one: the record is damaged.
    pub fn damage(&self) -> Option<String> {
        let marks = [
            ("untrusted_at", &self.untrusted),
            ("private_at", &self.private_data),
            ("egress_at", &self.egress),
        ];
        let stamps = self
            .began_ms
            .map(|b| ("began_at".to_string(), b))
            .into_iter();
        let stamps = stamps
            .chain(
                marks
                    .into_iter()
                    .filter_map(|(c, m)| m.as_ref().map(|m| (c.to_string(), m.at_ms))),
            )
            .chain(self.changed_tools.iter().map(|c| {
                let what = format!("change of `{}/{}`", c.server, c.tool);
                (what, c.at_ms)
            }));
        stamps
            .filter(|(_, ms)| rfc3339_ms(*ms).is_none())
            .map(|(what, ms)| format!("{what} = {ms} ms"))
            .next()
    }
}

/// `` `tool` `` or `` `server/tool` ``.
fn named(tool: &str, server: Option<&str>) -> String {
    match server {
        Some(s) => format!("`{s}/{tool}`"),
        None => format!("`{tool}`"),
    }
}

/// `` `tool` at TIME `` of a mark.
fn marked(m: &Mark) -> String {
    format!(
        "{} at {}",
        named(&m.tool, m.server.as_deref()),
        when(m.at_ms)
    )
}

/// Why a call of `tool` on `server` with `this` effects is riskier in `session`: each rule of
/// the module that applies, in the order unreadable record (every call of a session whose
/// record is damaged, [`SessionRisk::damage`], is R4), untrusted output, lethal trifecta,
/// changed tool. Empty for a clean session. Never panics, whatever the record holds.
pub fn escalations(
    session: &SessionRisk,
    this: Effects,
    tool: &str,
    server: Option<&str>,
) -> Vec<Escalated> {
    let me = named(tool, server);
    let mut out = Vec::new();
    if let Some(what) = session.damage() {
        out.push(Escalated {
            tier: RiskTier::R4,
            trigger: TRIGGER_UNREADABLE,
            why: format!(
                "the session's risk record is unreadable ({what}, outside 1970 to 9999: not written by this gateway), so what the session took in is unknown and {me} is confirmed by a person (R4)"
            ),
        });
    }
    if let Some(u) = &session.untrusted
        && (this.egress || this.writes)
    {
        let does = if this.egress {
            "sends data out"
        } else {
            "changes state"
        };
        out.push(Escalated {
            tier: RiskTier::R3,
            trigger: TRIGGER_UNTRUSTED,
            why: format!(
                "session read untrusted content from {}; {me} {does}, so a person decides (at least R3): the content may carry instructions from an attacker",
                marked(u)
            ),
        });
    }
    let trifecta = match (&session.private_data, &session.egress) {
        (Some(p), _) if this.egress => Some(format!(
            "lethal trifecta: the session holds private data from {}; {me} sends data out, so it may carry that data away (R4)",
            marked(p)
        )),
        (_, Some(e)) if this.private_data => Some(format!(
            "lethal trifecta: the session already sent data out with {}; {me} brings private data into it (R4)",
            marked(e)
        )),
        _ => None,
    };
    if let Some(why) = trifecta {
        out.push(Escalated {
            tier: RiskTier::R4,
            trigger: TRIGGER_TRIFECTA,
            why,
        });
    }
    let changed = session.changed_tools.iter().find(|c| {
        c.tool == tool
            && server == Some(c.server.as_str())
            && session.began_ms.is_some_and(|b| c.at_ms > b)
    });
    if let Some(c) = changed {
        let since = session
            .began_ms
            .map_or_else(String::new, |b| format!(" (began {})", when(b)));
        out.push(Escalated {
            tier: RiskTier::R4,
            trigger: TRIGGER_TOOL_CHANGED,
            why: format!(
                "the definition of {me} changed during this session{since}: {} at {}, so its calls in this session are R4",
                c.what,
                when(c.at_ms)
            ),
        });
    }
    out
}

/// Whether session state `now` may raise some call's risk beyond what state `seen` (read
/// earlier for the same session and tool) did: a mark (untrusted output, private data,
/// egress) appeared or differs, the record's damage ([`SessionRisk::damage`]) differs, or the
/// changes of the tool's definition that count (after the session began: `server`, `tool`,
/// `at_ms`) differ — every input of [`escalations`] but the wording of its reasons. A session
/// merely beginning, or a review's status in a change's `what`, does not move it.
///
/// What a decision re-gated against its session checks again under its write lock (found by
/// review: an in-client approval or an operator's edit checked against the state read before
/// the session took in untrusted output committed after it).
pub fn moved(seen: &SessionRisk, now: &SessionRisk) -> bool {
    let counting = |s: &SessionRisk| -> Vec<(String, String, i64)> {
        let after_began = |c: &&ToolChange| s.began_ms.is_some_and(|b| c.at_ms > b);
        let mut v: Vec<_> = s
            .changed_tools
            .iter()
            .filter(after_began)
            .map(|c| (c.server.clone(), c.tool.clone(), c.at_ms))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    seen.untrusted != now.untrusted
        || seen.private_data != now.private_data
        || seen.egress != now.egress
        || seen.damage() != now.damage()
        || counting(seen) != counting(now)
}

/// Whether session state `s` took in, at or after `since_ms` (Unix ms), something that can
/// raise a call's risk: a first mark of untrusted output, private data or egress, or a change
/// of the tool's definition that counts (after the session began) — or whether the record is
/// damaged ([`SessionRisk::damage`], fail closed). What an approving default on timeout is
/// refused for, `since_ms` the time the call was held: its default was chosen before the
/// session took that in, and no one has weighed the call since. Found by review: a call held at
/// R2 with an approving default and no trigger was approved by its timeout after the session
/// took in untrusted output, an egress that then needed an operator at R3.
pub fn took_in_since(s: &SessionRisk, since_ms: i64) -> bool {
    let after = |m: &Option<Mark>| m.as_ref().is_some_and(|m| m.at_ms >= since_ms);
    let counting = |c: &ToolChange| s.began_ms.is_some_and(|b| c.at_ms > b) && c.at_ms >= since_ms;
    after(&s.untrusted)
        || after(&s.private_data)
        || after(&s.egress)
        || s.damage().is_some()
        || s.changed_tools.iter().any(counting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at_ms: i64) -> Option<Mark> {
        Some(Mark {
            tool: "fetch".into(),
            server: None,
            at_ms,
        })
    }

    #[test]
    fn a_moment_past_year_9999_is_unreadable_not_a_panic() {
        assert_eq!(
            rfc3339_ms(LATEST_MS).as_deref(),
            Some("9999-12-31T23:59:59.999Z")
        );
        for ms in [LATEST_MS + 1, 253_402_300_800_000, i64::MAX, -1, i64::MIN] {
            assert_eq!(rfc3339_ms(ms), None, "{ms}");
        }
    }

    #[test]
    fn a_far_future_mark_holds_every_call_of_the_session_as_unreadable() {
        let egress = Effects {
            egress: true,
            ..Effects::default()
        };
        for s in [
            SessionRisk {
                untrusted: mark(i64::MAX),
                ..SessionRisk::CLEAN
            },
            SessionRisk {
                began_ms: Some(-5),
                ..SessionRisk::CLEAN
            },
            SessionRisk {
                began_ms: Some(1),
                changed_tools: vec![ToolChange {
                    server: "web".into(),
                    tool: "get".into(),
                    at_ms: 253_402_300_800_000,
                    what: "a new definition was accepted".into(),
                }],
                ..SessionRisk::CLEAN
            },
        ] {
            assert!(s.damage().is_some(), "{s:?}");
            for this in [egress, Effects::default()] {
                let e = escalations(&s, this, "get", Some("web"));
                assert_eq!(e[0].trigger, TRIGGER_UNREADABLE, "{e:?}");
                assert_eq!(e[0].tier, RiskTier::R4);
                assert!(e[0].why.contains("risk record is unreadable"), "{e:?}");
            }
        }
        // The untrusted mark's own escalation still fires, its time written as unreadable.
        let s = SessionRisk {
            untrusted: mark(i64::MAX),
            ..SessionRisk::CLEAN
        };
        let e = escalations(&s, egress, "send", None);
        assert_eq!(e[1].trigger, TRIGGER_UNTRUSTED);
        assert!(
            e[1].why
                .contains("an unreadable time (9223372036854775807 ms)")
        );
    }

    #[test]
    fn a_readable_record_is_not_damaged() {
        let s = SessionRisk {
            began_ms: Some(0),
            untrusted: mark(LATEST_MS),
            ..SessionRisk::CLEAN
        };
        assert_eq!(s.damage(), None);
        assert!(escalations(&s, Effects::default(), "get", None).is_empty());
    }

    #[test]
    fn a_session_moves_when_a_mark_or_a_counting_change_appears_not_when_it_merely_begins() {
        let change = |at_ms: i64, what: &str| ToolChange {
            server: "web".into(),
            tool: "get".into(),
            at_ms,
            what: what.into(),
        };
        let seen = SessionRisk::CLEAN;
        assert!(!moved(&seen, &SessionRisk::CLEAN));
        let began = SessionRisk {
            began_ms: Some(10),
            changed_tools: vec![change(5, "pending")],
            ..SessionRisk::CLEAN
        };
        assert!(!moved(&seen, &began), "began; the change predates it");
        for now in [
            SessionRisk {
                untrusted: mark(20),
                ..began.clone()
            },
            SessionRisk {
                private_data: mark(20),
                ..began.clone()
            },
            SessionRisk {
                egress: mark(20),
                ..began.clone()
            },
            SessionRisk {
                changed_tools: vec![change(5, "pending"), change(30, "pending")],
                ..began.clone()
            },
            SessionRisk {
                began_ms: Some(-5),
                ..began.clone()
            },
        ] {
            assert!(moved(&began, &now), "{now:?}");
            assert!(moved(&seen, &now), "{now:?}");
        }
        let reviewed = SessionRisk {
            changed_tools: vec![change(5, "accepted")],
            ..began.clone()
        };
        assert!(!moved(&began, &reviewed), "only the review's status");
        let marked = SessionRisk {
            untrusted: mark(20),
            ..began.clone()
        };
        assert!(!moved(&marked, &marked.clone()));
    }

    #[test]
    fn what_a_session_took_in_after_a_call_was_held_refuses_its_approving_default() {
        let held = 100;
        let before = SessionRisk {
            began_ms: Some(10),
            untrusted: mark(50),
            ..SessionRisk::CLEAN
        };
        assert!(!took_in_since(&before, held), "weighed when it was held");
        assert!(!took_in_since(&SessionRisk::CLEAN, held));
        let after = SessionRisk {
            private_data: mark(held),
            ..before.clone()
        };
        assert!(took_in_since(&after, held));
        let egress = SessionRisk {
            egress: mark(held + 1),
            ..before.clone()
        };
        assert!(took_in_since(&egress, held));
        let changed = |at_ms| ToolChange {
            server: "s".into(),
            tool: "fetch".into(),
            at_ms,
            what: "changed".into(),
        };
        let tool = SessionRisk {
            changed_tools: vec![changed(held + 5)],
            ..before.clone()
        };
        assert!(took_in_since(&tool, held));
        let old_change = SessionRisk {
            changed_tools: vec![changed(60)],
            ..before.clone()
        };
        assert!(!took_in_since(&old_change, held));
        let damaged = SessionRisk {
            untrusted: mark(i64::MAX),
            ..before
        };
        assert!(
            took_in_since(&damaged, held),
            "a damaged record fails closed"
        );
    }
}
