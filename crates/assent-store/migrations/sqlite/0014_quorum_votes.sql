-- assent store schema: quorum approvals (issue 14 §1). An approval keeps the quorum its
-- covering rules asked for (JSON, NULL when one approval decides) and every vote cast on it;
-- the primary key makes a principal's second vote on one approval impossible.
ALTER TABLE approvals ADD COLUMN quorum TEXT;
CREATE TABLE votes (
    approval_id TEXT NOT NULL REFERENCES approvals(id),
    principal   TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('approve', 'deny')),
    roles       TEXT NOT NULL,             -- JSON list: the voter's roles when they voted
    reason      TEXT,
    at          INTEGER NOT NULL,
    PRIMARY KEY (approval_id, principal)
);
