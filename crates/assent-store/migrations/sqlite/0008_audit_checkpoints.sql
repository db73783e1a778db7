-- assent store schema v8: signed audit checkpoints (issue 10 §11). Kept apart from the audit
-- table, so deleting audit rows cannot remove the evidence of how far the chain reached.
CREATE TABLE audit_checkpoints (
    seq             INTEGER PRIMARY KEY,       -- audit seq of the newest record covered
    head_hash       TEXT NOT NULL,             -- that record's chain hash
    record_count    INTEGER NOT NULL,          -- audit records when it was signed
    time            INTEGER NOT NULL,          -- Unix milliseconds
    public_key      TEXT NOT NULL,             -- Ed25519 public key, 64 hex characters
    signature       TEXT NOT NULL              -- Ed25519 signature, 128 hex characters
);
