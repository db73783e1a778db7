-- assent store schema: state replicas of one database share (issue 13 §2).
-- A webhook's delivery lease: the replica (`holder`, a random id per process) that may deliver
-- its events and move its cursor until `lease_until` (Unix ms); another takes over after it.
ALTER TABLE webhook_cursors ADD COLUMN holder TEXT;
ALTER TABLE webhook_cursors ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;

-- Signed-in dashboard operators, by the SHA-256 (hex) of their cookie's value: a session
-- started on one replica is known to every other.
CREATE TABLE ui_sessions (
    id_sha256   TEXT PRIMARY KEY,
    operator    TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions(expires_at);
