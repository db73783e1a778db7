-- assent store schema: state replicas of one database share (issue 13 §2).
-- A webhook's delivery lease: the replica (`holder`, a random id per process) that may deliver
-- its events and move its cursor until `lease_until` (Unix ms); another takes over after it.
ALTER TABLE webhook_cursors ADD COLUMN holder TEXT COLLATE "C";
ALTER TABLE webhook_cursors ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;

-- Signed-in dashboard operators, by the SHA-256 (hex) of their cookie's value: a session
-- started on one replica is known to every other.
CREATE TABLE ui_sessions (
    id_sha256   TEXT COLLATE "C" PRIMARY KEY,
    operator    TEXT COLLATE "C" NOT NULL,
    csrf        TEXT COLLATE "C" NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions(expires_at);

-- Failed authentications counted across replicas (a GCRA: `tat` is the theoretical arrival
-- time, Unix ms, of the next allowed failure of `who`, an address or a key prefix). UNLOGGED
-- and written without waiting for a flush: losing it in a crash only forgets a throttle.
CREATE UNLOGGED TABLE auth_failures (
    who  TEXT COLLATE "C" PRIMARY KEY,
    tat  BIGINT NOT NULL
);
CREATE INDEX auth_failures_tat ON auth_failures(tat);
