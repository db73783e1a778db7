-- assent store schema v3: AAEP subscriptions, events, reply tokens; clarifications.
ALTER TABLE approvals ADD COLUMN reply_token TEXT COLLATE "C";              -- AAEP rpl_ token of its confirmation
ALTER TABLE approvals ADD COLUMN progress_marks BIGINT NOT NULL DEFAULT 0;  -- 1: 50% event sent, 2: 10% sent
CREATE UNIQUE INDEX approvals_reply_token ON approvals(reply_token);

CREATE TABLE aaep_subscriptions (
    id              TEXT COLLATE "C" PRIMARY KEY,          -- sub_ + 32 hex
    principal       TEXT COLLATE "C" NOT NULL,             -- the operator who opened it
    subscriber_id   TEXT COLLATE "C" NOT NULL,
    request         TEXT COLLATE "C" NOT NULL,             -- the subscription.request (JSON)
    honored         TEXT COLLATE "C" NOT NULL,             -- honored_capabilities (JSON)
    start_seq       BIGINT NOT NULL,          -- events after this one are delivered
    created_at      BIGINT NOT NULL,
    closed_at       BIGINT
);

CREATE TABLE aaep_events (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- sequence_number
    event_id        TEXT COLLATE "C" NOT NULL UNIQUE,               -- evt_ + 32 hex
    type            TEXT COLLATE "C" NOT NULL,
    critical        BOOLEAN NOT NULL,                   -- never filtered (AAEP §5.5.4)
    subscription_id TEXT COLLATE "C",                               -- NULL: every subscription
    approval_id     TEXT COLLATE "C",
    at              BIGINT NOT NULL,
    data            TEXT COLLATE "C" NOT NULL                       -- the event without sequence_number
);

CREATE TABLE clarifications (
    id              TEXT COLLATE "C" PRIMARY KEY,          -- UUID v4
    agent           TEXT COLLATE "C" NOT NULL,
    session_id      TEXT COLLATE "C" NOT NULL,
    question        TEXT COLLATE "C" NOT NULL,
    kinds           TEXT COLLATE "C" NOT NULL,             -- JSON array of accepted_response_kinds
    choices         TEXT COLLATE "C" NOT NULL,             -- JSON array of {value, label}
    context         TEXT COLLATE "C",
    reply_token     TEXT COLLATE "C" NOT NULL UNIQUE,
    requested_at    BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    status          TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending','answered','expired','cancelled')),
    response        TEXT COLLATE "C",                      -- JSON value
    answered_by     TEXT COLLATE "C",
    answered_at     BIGINT
);
CREATE INDEX clarifications_status ON clarifications(status, expires_at);
