-- assent store schema v3: AAEP subscriptions, events, reply tokens; clarifications.
ALTER TABLE approvals ADD COLUMN reply_token TEXT;              -- AAEP rpl_ token of its confirmation
ALTER TABLE approvals ADD COLUMN progress_marks INTEGER NOT NULL DEFAULT 0;  -- 1: 50% event sent, 2: 10% sent
CREATE UNIQUE INDEX approvals_reply_token ON approvals(reply_token);

CREATE TABLE aaep_subscriptions (
    id              TEXT PRIMARY KEY,          -- sub_ + 32 hex
    principal       TEXT NOT NULL,             -- the operator who opened it
    subscriber_id   TEXT NOT NULL,
    request         TEXT NOT NULL,             -- the subscription.request (JSON)
    honored         TEXT NOT NULL,             -- honored_capabilities (JSON)
    start_seq       INTEGER NOT NULL,          -- events after this one are delivered
    created_at      INTEGER NOT NULL,
    closed_at       INTEGER
);

CREATE TABLE aaep_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,  -- sequence_number
    event_id        TEXT NOT NULL UNIQUE,               -- evt_ + 32 hex
    type            TEXT NOT NULL,
    critical        INTEGER NOT NULL,                   -- never filtered (AAEP §5.5.4)
    subscription_id TEXT,                               -- NULL: every subscription
    approval_id     TEXT,
    at              INTEGER NOT NULL,
    data            TEXT NOT NULL                       -- the event without sequence_number
);

CREATE TABLE clarifications (
    id              TEXT PRIMARY KEY,          -- UUID v4
    agent           TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    question        TEXT NOT NULL,
    kinds           TEXT NOT NULL,             -- JSON array of accepted_response_kinds
    choices         TEXT NOT NULL,             -- JSON array of {value, label}
    context         TEXT,
    reply_token     TEXT NOT NULL UNIQUE,
    requested_at    INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending','answered','expired','cancelled')),
    response        TEXT,                      -- JSON value
    answered_by     TEXT,
    answered_at     INTEGER
);
CREATE INDEX clarifications_status ON clarifications(status, expires_at);
