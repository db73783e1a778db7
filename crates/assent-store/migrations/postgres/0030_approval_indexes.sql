-- assent store schema: the approvals' indexes touch fewer pages per write (BENCHMARKS.md,
-- "Where a cycle's server CPU goes"). A decision changes `status`; every index holding it
-- had its entry moved, most of them to a random place (the call hash, the Confirm target), and
-- the indexes that only pending approvals are looked up in held every approval ever made.
-- Now what is looked up only while pending is indexed only while pending (small: a decided
-- approval leaves it), and the session and target indexes no longer change when an approval
-- is decided. Listing by a status other than pending reads `approvals_requested` from its
-- newest end, as before.
DROP INDEX approvals_dedupe;
DROP INDEX approvals_agent;
DROP INDEX approvals_status_expires;
DROP INDEX approvals_session;
DROP INDEX approvals_target;
-- The de-duplication of a held call, an agent's and a session's pending count (a prefix).
CREATE INDEX approvals_pending ON approvals(agent, session_id, call_hash) WHERE status = 'pending';
-- The expiry and escalation sweeps, the pending count per tier.
CREATE INDEX approvals_pending_expires ON approvals(expires_at) WHERE status = 'pending';
CREATE INDEX approvals_session ON approvals(session_id);
CREATE INDEX approvals_target ON approvals(target_id);
