-- assent store schema: the approvals whose audit records a retention run archived, each with
-- the digest of its seals as the run found them (`archived_approvals.rs`). Each run signs the
-- digest of the rows it added in its manifest (`audit_archives.approvals_sha256`), so
-- `assent audit verify` excuses a settled approval's missing records only for an approval a
-- run recorded, and holds it to the seals it had then. Found by review: every settled approval
-- older than the newest cut-off was excused, so one edited (its seals cleared) or planted with
-- old times after its records were archived passed.
CREATE TABLE archived_approvals (
    approval_id     TEXT PRIMARY KEY,
    anchor_last_seq BIGINT NOT NULL,   -- the run's manifest `last_seq`
    seals           TEXT NOT NULL      -- SHA-256 (hex) of the terms and settlement seals, '' when they did not hold then
);
CREATE INDEX archived_approvals_anchor ON archived_approvals(anchor_last_seq, approval_id);
ALTER TABLE audit_archives ADD COLUMN approvals_sha256 TEXT;
