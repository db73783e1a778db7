-- assent store schema v4: MPLP plans and Confirms on non-tool-call targets.
ALTER TABLE approvals ADD COLUMN target_diff TEXT COLLATE "C";          -- RFC 6902 patch from the previous submission (JSON)

CREATE TABLE plans (
    plan_id         TEXT COLLATE "C" PRIMARY KEY,          -- UUID v4 (MPLP plan_id)
    agent           TEXT COLLATE "C" NOT NULL,             -- the agent that owns it
    session_id      TEXT COLLATE "C" NOT NULL,
    status          TEXT COLLATE "C" NOT NULL,             -- draft | proposed | approved | in_progress | completed | cancelled | failed
    body            TEXT COLLATE "C" NOT NULL,             -- the MPLP plan as last written (JSON, without status and events)
    submitted       TEXT COLLATE "C",                      -- the body of the last submission (JSON), for the next diff
    confirm_id      TEXT COLLATE "C",                      -- the approval (MPLP Confirm) of the last submission
    events          TEXT COLLATE "C" NOT NULL DEFAULT '[]',-- MPLP common events of its lifecycle (JSON array)
    trace_id        TEXT COLLATE "C" NOT NULL,             -- UUID v4
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX approvals_target ON approvals(target_id, status);
