-- assent store schema v1 (Postgres). Times are Unix milliseconds (UTC).
CREATE TABLE approvals (
    id              TEXT COLLATE "C" PRIMARY KEY,          -- UUID v4
    agent           TEXT COLLATE "C" NOT NULL,
    session_id      TEXT COLLATE "C" NOT NULL,
    tool            TEXT COLLATE "C" NOT NULL,
    server          TEXT COLLATE "C",                      -- MCP server alias, NULL for local tools
    arguments       TEXT COLLATE "C" NOT NULL,             -- canonical JSON of the arguments
    canonical       TEXT COLLATE "C" NOT NULL,             -- canonical JSON of the call
    call_hash       TEXT COLLATE "C" NOT NULL,             -- lowercase hex SHA-256 of `canonical`
    message         TEXT COLLATE "C" NOT NULL,
    risk_tier       TEXT COLLATE "C" NOT NULL,
    irreversible    BOOLEAN NOT NULL,
    reasons         TEXT COLLATE "C" NOT NULL,             -- JSON array of {file, rule, text}
    approvers       TEXT COLLATE "C" NOT NULL,             -- JSON array of role names
    default_decision TEXT COLLATE "C" NOT NULL,            -- approve | reject
    requested_at    BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    status          TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending','approved','rejected','expired','cancelled')),
    decided_at      BIGINT,
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY  -- SQLite's implicit rowid (ORDER BY … rowid)
);
CREATE INDEX approvals_status_expires ON approvals(status, expires_at);
CREATE INDEX approvals_agent ON approvals(agent, status);

CREATE TABLE decisions (
    approval_id     TEXT COLLATE "C" NOT NULL REFERENCES approvals(id),
    decision        TEXT COLLATE "C" NOT NULL,             -- approve | deny | expire | cancel
    reason          TEXT COLLATE "C",
    actor           TEXT COLLATE "C" NOT NULL,             -- principal name, or "system:expiry"
    at              BIGINT NOT NULL,
    default_applied TEXT COLLATE "C",                      -- for expiry: approve | reject
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY  -- SQLite's implicit rowid (ORDER BY … rowid)
);
CREATE INDEX decisions_approval ON decisions(approval_id);

CREATE TABLE tokens (
    token_id        TEXT COLLATE "C" PRIMARY KEY,          -- UUID v4 (seed 002 tokenId)
    approval_id     TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES approvals(id),
    agent           TEXT COLLATE "C" NOT NULL,
    call_hash       TEXT COLLATE "C" NOT NULL,
    issued_at       BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    used_at         BIGINT,
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY  -- SQLite's implicit rowid (ORDER BY … rowid)
);

CREATE TABLE audit (
    seq             BIGINT PRIMARY KEY,       -- 1, 2, 3, ... without gaps
    at              BIGINT NOT NULL,
    kind            TEXT COLLATE "C" NOT NULL,
    approval_id     TEXT COLLATE "C",
    actor           TEXT COLLATE "C" NOT NULL,
    data            TEXT COLLATE "C" NOT NULL,             -- canonical JSON
    prev_hash       TEXT COLLATE "C" NOT NULL,
    hash            TEXT COLLATE "C" NOT NULL
);
