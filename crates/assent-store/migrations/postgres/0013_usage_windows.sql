-- assent store schema: per-session windows kept incrementally (issue 13 §5), so that a
-- proposal's threshold checks read what its policy's windows reach, not the session's history.
--
-- usage.folded: 0 = the call's approval may still change whether it counts (pending, or settled
-- since the session's last proposal): read live; 1 = settled and counting (allowed, approved,
-- expired into an approval), its costs are in usage_totals; 2 = settled and not counting
-- (rejected, cancelled, expired into a rejection).
ALTER TABLE usage ADD COLUMN folded BIGINT NOT NULL DEFAULT 0 CHECK (folded IN (0, 1, 2));
UPDATE usage SET folded = 1 WHERE approval_id IS NULL;
UPDATE usage SET folded = CASE
        WHEN (SELECT a.status = 'approved' OR (a.status = 'expired' AND a.default_decision = 'approve')
              FROM approvals a WHERE a.id = usage.approval_id) THEN 1
        ELSE 2 END
    WHERE approval_id IS NOT NULL
      AND (SELECT a.status FROM approvals a WHERE a.id = usage.approval_id) <> 'pending';
CREATE INDEX usage_live ON usage(agent, session_id, at) WHERE folded = 0;
CREATE INDEX usage_approval ON usage(approval_id);

-- Session totals of one cost argument over the folded, counting calls of one tool (on one
-- server). `total` is the f64 sum in Rust's shortest round-trip text.
CREATE TABLE usage_totals (
    agent       TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    tool        TEXT COLLATE "C" NOT NULL,
    server      TEXT COLLATE "C",
    argument    TEXT COLLATE "C" NOT NULL,
    total       TEXT COLLATE "C" NOT NULL
);
CREATE INDEX usage_totals_session ON usage_totals(agent, session_id, argument);

-- The cost arguments whose totals a session keeps (filled from its history the first time a
-- policy names the argument; kept up to date from then on).
CREATE TABLE usage_tracked (
    agent       TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    argument    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (agent, session_id, argument)
);
