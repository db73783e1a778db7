-- assent store schema: quorum approvals (issue 14 §1). An approval keeps the quorum its
-- covering rules asked for (JSON, NULL when one approval decides) and every vote cast on it;
-- the primary key makes a principal's second vote on one approval impossible.
ALTER TABLE approvals ADD COLUMN quorum TEXT COLLATE "C";
CREATE TABLE votes (
    approval_id TEXT COLLATE "C" NOT NULL REFERENCES approvals(id),
    principal   TEXT COLLATE "C" NOT NULL,
    decision    TEXT COLLATE "C" NOT NULL CHECK (decision IN ('approve', 'deny')),
    roles       TEXT COLLATE "C" NOT NULL,             -- JSON list: the voter's roles
    reason      TEXT COLLATE "C",
    at          BIGINT NOT NULL,
    rowid       BIGINT GENERATED ALWAYS AS IDENTITY,   -- SQLite's implicit rowid (voting order)
    PRIMARY KEY (approval_id, principal)
);
