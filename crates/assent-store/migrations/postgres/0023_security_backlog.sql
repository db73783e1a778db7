-- assent store schema: the security backlog.
-- A dashboard session's last authentication (Unix ms: its sign-in, by key or SSO), so that a
-- sensitive form (removing a passkey) asks for a recent one; a session stored before this
-- migration counts as authenticated long ago (0), never as fresh.
ALTER TABLE ui_sessions ADD COLUMN authenticated_at BIGINT NOT NULL DEFAULT 0;
-- A session's risk state records its last call that may run (Unix ms), so that retention
-- prunes only the state of idle sessions. The sessions known now count as active from this
-- migration on (a full retention window before any of them may go).
ALTER TABLE session_risk ADD COLUMN last_at BIGINT NOT NULL DEFAULT 0;
UPDATE session_risk SET last_at = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT);
CREATE INDEX session_risk_last ON session_risk(last_at);
-- The insights' time ranges: prompts by `requested_at`; outright verdicts by time, read in
-- (at, seq) order a chunk at a time.
CREATE INDEX approvals_requested ON approvals(requested_at);
CREATE INDEX audit_at ON audit(at, seq);
