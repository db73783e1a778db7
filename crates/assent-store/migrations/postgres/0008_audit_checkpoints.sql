-- assent store schema v8: signed audit checkpoints (issue 10 §11). Kept apart from the audit
-- table, so deleting audit rows cannot remove the evidence of how far the chain reached.
CREATE TABLE audit_checkpoints (
    seq             BIGINT PRIMARY KEY,       -- audit seq of the newest record covered
    head_hash       TEXT COLLATE "C" NOT NULL,             -- that record's chain hash
    record_count    BIGINT NOT NULL,          -- audit records when it was signed
    time            BIGINT NOT NULL,          -- Unix milliseconds
    public_key      TEXT COLLATE "C" NOT NULL,             -- Ed25519 public key, 64 hex characters
    signature       TEXT COLLATE "C" NOT NULL              -- Ed25519 signature, 128 hex characters
);
