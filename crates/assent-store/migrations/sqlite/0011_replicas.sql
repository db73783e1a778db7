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

-- Failed authentications counted across replicas (a GCRA: `tat` is the theoretical arrival
-- time, Unix ms, of the next allowed failure of `who`, an address or a key prefix). Used on
-- PostgreSQL only (one SQLite process counts in memory); kept here so both schemas agree.
CREATE TABLE auth_failures (
    who  TEXT PRIMARY KEY,
    tat  INTEGER NOT NULL
);
CREATE INDEX auth_failures_tat ON auth_failures(tat);
