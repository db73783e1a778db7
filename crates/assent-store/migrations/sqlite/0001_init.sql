-- assent store schema v1 (SQLite). Times are Unix milliseconds (UTC).
CREATE TABLE approvals (
    id              TEXT PRIMARY KEY,          -- UUID v4
    agent           TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    tool            TEXT NOT NULL,
    server          TEXT,                      -- MCP server alias, NULL for local tools
    arguments       TEXT NOT NULL,             -- canonical JSON of the arguments
    canonical       TEXT NOT NULL,             -- canonical JSON of the call
    call_hash       TEXT NOT NULL,             -- lowercase hex SHA-256 of `canonical`
    message         TEXT NOT NULL,
    risk_tier       TEXT NOT NULL,
    irreversible    INTEGER NOT NULL,
    reasons         TEXT NOT NULL,             -- JSON array of {file, rule, text}
    approvers       TEXT NOT NULL,             -- JSON array of role names
    default_decision TEXT NOT NULL,            -- approve | reject
    requested_at    INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending','approved','rejected','expired','cancelled')),
    decided_at      INTEGER
);
CREATE INDEX approvals_status_expires ON approvals(status, expires_at);
CREATE INDEX approvals_agent ON approvals(agent, status);

CREATE TABLE decisions (
    approval_id     TEXT NOT NULL REFERENCES approvals(id),
    decision        TEXT NOT NULL,             -- approve | deny | expire | cancel
    reason          TEXT,
    actor           TEXT NOT NULL,             -- principal name, or "system:expiry"
    at              INTEGER NOT NULL,
    default_applied TEXT                       -- for expiry: approve | reject
);
CREATE INDEX decisions_approval ON decisions(approval_id);

CREATE TABLE tokens (
    token_id        TEXT PRIMARY KEY,          -- UUID v4 (seed 002 tokenId)
    approval_id     TEXT NOT NULL UNIQUE REFERENCES approvals(id),
    agent           TEXT NOT NULL,
    call_hash       TEXT NOT NULL,
    issued_at       INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    used_at         INTEGER
);

CREATE TABLE audit (
    seq             INTEGER PRIMARY KEY,       -- 1, 2, 3, ... without gaps
    at              INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    approval_id     TEXT,
    actor           TEXT NOT NULL,
    data            TEXT NOT NULL,             -- canonical JSON
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL
);
