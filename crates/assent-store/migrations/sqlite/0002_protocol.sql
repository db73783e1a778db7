-- assent store schema v2: scoped and edited approvals, grants, thresholds, escalation, devices.
ALTER TABLE approvals ADD COLUMN run_id TEXT;
ALTER TABLE approvals ADD COLUMN device_id TEXT;
ALTER TABLE approvals ADD COLUMN group_key TEXT NOT NULL DEFAULT '';        -- agent, server, tool, rules
ALTER TABLE approvals ADD COLUMN human_summary TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN triggers TEXT NOT NULL DEFAULT '[]';        -- JSON array: rate, cost, paths, domains
ALTER TABLE approvals ADD COLUMN suggested_alternatives TEXT NOT NULL DEFAULT '[]';
ALTER TABLE approvals ADD COLUMN escalate_to TEXT NOT NULL DEFAULT '[]';     -- JSON array of roles
ALTER TABLE approvals ADD COLUMN escalate_after_ms INTEGER;
ALTER TABLE approvals ADD COLUMN escalated_at INTEGER;
ALTER TABLE approvals ADD COLUMN output_bytes INTEGER;
ALTER TABLE approvals ADD COLUMN scope TEXT;                 -- once | session | 15m | workspace, once decided
ALTER TABLE approvals ADD COLUMN grant_id TEXT;              -- the grant this approval created or used
ALTER TABLE approvals ADD COLUMN edited_arguments TEXT;      -- canonical JSON of the operator's edit
ALTER TABLE approvals ADD COLUMN edited_canonical TEXT;
ALTER TABLE approvals ADD COLUMN edited_hash TEXT;
ALTER TABLE approvals ADD COLUMN trace_id TEXT;              -- MPLP trace (UUID v4), agent-given or generated
ALTER TABLE approvals ADD COLUMN span_id TEXT;               -- MPLP span of this approval (UUID v4)
ALTER TABLE approvals ADD COLUMN target_type TEXT NOT NULL DEFAULT 'other';  -- MPLP Confirm target_type
ALTER TABLE approvals ADD COLUMN target_id TEXT;             -- MPLP Confirm target_id (UUID v4)
ALTER TABLE decisions ADD COLUMN decision_id TEXT;           -- MPLP decision_id (UUID v4)
CREATE INDEX audit_approval ON audit(approval_id, kind);
CREATE INDEX approvals_session ON approvals(session_id, status);
CREATE INDEX approvals_dedupe ON approvals(agent, session_id, call_hash, status);

ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'once';
ALTER TABLE tokens ADD COLUMN device_id TEXT;                -- issuedToClientDeviceId

CREATE TABLE grants (
    id              TEXT PRIMARY KEY,          -- UUID v4
    agent           TEXT NOT NULL,
    session_id      TEXT,                      -- set for scope `session`
    tool            TEXT NOT NULL,
    server          TEXT,
    call_hash       TEXT,                      -- NULL when widened to the whole tool
    scope           TEXT NOT NULL,
    risk_tier       TEXT NOT NULL,
    discouraged     INTEGER NOT NULL,          -- workspace scope on an R3/R4 tool
    approval_id     TEXT NOT NULL REFERENCES approvals(id),
    created_by      TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER,                   -- NULL: until revoked (or end of session)
    revoked_at      INTEGER,
    revoked_by      TEXT
);
CREATE INDEX grants_lookup ON grants(agent, tool, revoked_at);

-- Calls that count toward rate and cost thresholds (allowed, granted or held).
CREATE TABLE usage (
    agent           TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    tool            TEXT NOT NULL,
    server          TEXT,
    at              INTEGER NOT NULL,
    arguments       TEXT NOT NULL,             -- canonical JSON
    approval_id     TEXT REFERENCES approvals(id)
);
CREATE INDEX usage_session ON usage(agent, session_id, at);
