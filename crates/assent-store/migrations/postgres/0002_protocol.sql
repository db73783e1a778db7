-- assent store schema v2: scoped and edited approvals, grants, thresholds, escalation, devices.
ALTER TABLE approvals ADD COLUMN run_id TEXT COLLATE "C";
ALTER TABLE approvals ADD COLUMN device_id TEXT COLLATE "C";
ALTER TABLE approvals ADD COLUMN group_key TEXT COLLATE "C" NOT NULL DEFAULT '';        -- agent, server, tool, rules
ALTER TABLE approvals ADD COLUMN human_summary TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN triggers TEXT COLLATE "C" NOT NULL DEFAULT '[]';        -- JSON array: rate, cost, paths, domains
ALTER TABLE approvals ADD COLUMN suggested_alternatives TEXT COLLATE "C" NOT NULL DEFAULT '[]';
ALTER TABLE approvals ADD COLUMN escalate_to TEXT COLLATE "C" NOT NULL DEFAULT '[]';     -- JSON array of roles
ALTER TABLE approvals ADD COLUMN escalate_after_ms BIGINT;
ALTER TABLE approvals ADD COLUMN escalated_at BIGINT;
ALTER TABLE approvals ADD COLUMN output_bytes BIGINT;
ALTER TABLE approvals ADD COLUMN scope TEXT COLLATE "C";                 -- once | session | 15m | workspace, once decided
ALTER TABLE approvals ADD COLUMN grant_id TEXT COLLATE "C";              -- the grant this approval created or used
ALTER TABLE approvals ADD COLUMN edited_arguments TEXT COLLATE "C";      -- canonical JSON of the operator's edit
ALTER TABLE approvals ADD COLUMN edited_canonical TEXT COLLATE "C";
ALTER TABLE approvals ADD COLUMN edited_hash TEXT COLLATE "C";
ALTER TABLE approvals ADD COLUMN trace_id TEXT COLLATE "C";              -- MPLP trace (UUID v4), agent-given or generated
ALTER TABLE approvals ADD COLUMN span_id TEXT COLLATE "C";               -- MPLP span of this approval (UUID v4)
ALTER TABLE approvals ADD COLUMN target_type TEXT COLLATE "C" NOT NULL DEFAULT 'other';  -- MPLP Confirm target_type
ALTER TABLE approvals ADD COLUMN target_id TEXT COLLATE "C";             -- MPLP Confirm target_id (UUID v4)
ALTER TABLE decisions ADD COLUMN decision_id TEXT COLLATE "C";           -- MPLP decision_id (UUID v4)
CREATE INDEX audit_approval ON audit(approval_id, kind);
CREATE INDEX approvals_session ON approvals(session_id, status);
CREATE INDEX approvals_dedupe ON approvals(agent, session_id, call_hash, status);

ALTER TABLE tokens ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT 'once';
ALTER TABLE tokens ADD COLUMN device_id TEXT COLLATE "C";                -- issuedToClientDeviceId

CREATE TABLE grants (
    id              TEXT COLLATE "C" PRIMARY KEY,          -- UUID v4
    agent           TEXT COLLATE "C" NOT NULL,
    session_id      TEXT COLLATE "C",                      -- set for scope `session`
    tool            TEXT COLLATE "C" NOT NULL,
    server          TEXT COLLATE "C",
    call_hash       TEXT COLLATE "C",                      -- NULL when widened to the whole tool
    scope           TEXT COLLATE "C" NOT NULL,
    risk_tier       TEXT COLLATE "C" NOT NULL,
    discouraged     BOOLEAN NOT NULL,          -- workspace scope on an R3/R4 tool
    approval_id     TEXT COLLATE "C" NOT NULL REFERENCES approvals(id),
    created_by      TEXT COLLATE "C" NOT NULL,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT,                   -- NULL: until revoked (or end of session)
    revoked_at      BIGINT,
    revoked_by      TEXT COLLATE "C",
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY  -- SQLite's implicit rowid (ORDER BY … rowid)
);
CREATE INDEX grants_lookup ON grants(agent, tool, revoked_at);

-- Calls that count toward rate and cost thresholds (allowed, granted or held).
CREATE TABLE usage (
    agent           TEXT COLLATE "C" NOT NULL,
    session_id      TEXT COLLATE "C" NOT NULL,
    tool            TEXT COLLATE "C" NOT NULL,
    server          TEXT COLLATE "C",
    at              BIGINT NOT NULL,
    arguments       TEXT COLLATE "C" NOT NULL,             -- canonical JSON
    approval_id     TEXT COLLATE "C" REFERENCES approvals(id)
);
CREATE INDEX usage_session ON usage(agent, session_id, at);
