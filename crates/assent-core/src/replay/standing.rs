//! The grants standing when a replay runs: the candidate would be put in force now, beside
//! them, so a recorded call it holds for a person that one of them covers would run unasked
//! (found by review: replay took such a call as a prompt, so turning a `deny` into a confirm
//! that an old whole-tool grant covers passed the CI gate, and the live gateway then ran the
//! calls once denied with nobody asked).

use crate::canonical::CanonicalCall;
use crate::grant::{CallView, GrantView, covers, may_use_grant};
use crate::verdict::{Verdict, VerdictKind};
use serde::{Deserialize, Serialize};

/// A grant standing when the replay runs, as far as coverage goes (an owned [`GrantView`]):
/// not revoked, not expired then. Read from the store's `grants` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingGrant {
    /// The agent it lets through.
    pub agent: String,
    /// For scope `session`: the session; `None` for any.
    pub session_id: Option<String>,
    /// Tool name.
    pub tool: String,
    /// MCP server alias; `None` for a local tool.
    pub server: Option<String>,
    /// The call hash it covers; `None` when widened to the whole tool.
    pub call_hash: Option<String>,
    /// Unix milliseconds; `None` for no expiry.
    pub expires_at: Option<i64>,
    /// When it was made, Unix milliseconds.
    pub created_at: i64,
}

impl StandingGrant {
    /// As coverage judges it in a replay: a `session` grant covers every session (the agent
    /// names its session, so once the candidate is in force it may call under the grant's;
    /// found by review), lapsing when it would ([`crate::grant::covers`]).
    fn view(&self) -> GrantView<'_> {
        let lapses = self.expires_at.or_else(|| {
            self.session_id.as_ref().map(|_| {
                (self.created_at).saturating_add(crate::grant::DEFAULT_SESSION_GRANT_MAX_MS)
            })
        });
        GrantView {
            agent: &self.agent,
            session_id: None,
            tool: &self.tool,
            server: self.server.as_deref(),
            call_hash: self.call_hash.as_deref(),
            expires_at: lapses,
            created_at: self.created_at,
            revoked: false,
        }
    }
}

/// The grants standing at `at_ms` (Unix ms: when the replay runs).
#[derive(Debug, Default)]
pub(crate) struct Standing {
    grants: Vec<StandingGrant>,
    at_ms: i64,
}

impl Standing {
    /// `grants`, judged at `at_ms`.
    pub(crate) fn new(grants: Vec<StandingGrant>, at_ms: i64) -> Self {
        Self { grants, at_ms }
    }

    /// When the candidate's `verdict` for the call `call` of `agent` in `session_id` is a
    /// confirm that a standing grant would stand in for now ([`may_use_grant`], [`covers`]): the
    /// Unix ms the oldest such grant was made (no one would be asked); `None` when none would.
    /// A call that cannot be hashed is covered by none (nor could it be proposed).
    pub(crate) fn covers(
        &self,
        (agent, session_id): (&str, &str),
        call: &crate::canonical::ToolCall,
        verdict: &Verdict,
    ) -> Option<i64> {
        if verdict.kind != VerdictKind::Confirm || !may_use_grant(&verdict.terms, false) {
            return None;
        }
        let same_tool =
            |g: &&StandingGrant| g.agent == agent && g.tool == call.tool && g.server == call.server;
        let mut mine = self.grants.iter().filter(same_tool).peekable();
        mine.peek()?;
        let hashed = CanonicalCall::new(call.clone()).ok()?;
        let c = CallView {
            agent,
            session_id,
            tool: &call.tool,
            server: call.server.as_deref(),
            call_hash: hashed.call_hash(),
            now: self.at_ms,
        };
        mine.filter(|g| covers(&g.view(), &c))
            .map(|g| g.created_at)
            .min()
    }
}
