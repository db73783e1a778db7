-- assent store schema: the security backlog.
-- A dashboard session's last authentication (Unix ms: its sign-in, by key or SSO), so that a
-- sensitive form (removing a passkey) asks for a recent one; a session stored before this
-- migration counts as authenticated long ago (0), never as fresh.
ALTER TABLE ui_sessions ADD COLUMN authenticated_at INTEGER NOT NULL DEFAULT 0;
