-- assent store schema v7: the operator's card (issue 5) and outgoing webhooks.
ALTER TABLE approvals ADD COLUMN side_effects TEXT NOT NULL DEFAULT '[]';
ALTER TABLE approvals ADD COLUMN rollback TEXT NOT NULL DEFAULT '[]';
ALTER TABLE approvals ADD COLUMN dry_run_tool TEXT;
ALTER TABLE approvals ADD COLUMN redact TEXT NOT NULL DEFAULT '[]';

-- Each webhook's place in the audit log: events after `last_seq` are still to be delivered.
CREATE TABLE webhook_cursors (
    webhook     TEXT PRIMARY KEY,
    last_seq    INTEGER NOT NULL
);

-- Deliveries that failed every attempt (the dead-letter record).
CREATE TABLE webhook_dead_letters (
    id          INTEGER PRIMARY KEY,
    webhook     TEXT NOT NULL,
    audit_seq   INTEGER NOT NULL,
    event       TEXT NOT NULL,
    body        TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    last_error  TEXT NOT NULL,
    failed_at   INTEGER NOT NULL
);

-- Single-use links that open an approval's card in the dashboard (by SHA-256 of the token).
CREATE TABLE card_links (
    token_sha256 TEXT PRIMARY KEY,
    approval_id  TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER
);
