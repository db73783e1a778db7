-- assent store schema: the take-over signature of each `audit.key_replaced` record
-- (`checkpoint::take_over`, and retention's carry, `checkpoint::sign_carried`): Ed25519 by
-- the audit key named in `public_key` (64 hex) over the canonical JSON of
-- `{"format": "assent-audit-takeover/1", "seq", "hash", "record"}` (`key_replaced.rs`).
-- Found by review: a take-over was trusted on the routine checkpoint at its record, which
-- the checkpoint timer signs over whatever head there is, so a database writer's appended
-- take-over row was signed by the gateway itself. Only the take-over code signs here.
CREATE TABLE audit_takeovers (
    seq         BIGINT PRIMARY KEY,
    public_key  TEXT COLLATE "C" NOT NULL,
    signature   TEXT COLLATE "C" NOT NULL
);
-- The take-over records, read by retention under the writer's lock and by every verify:
-- without it each read scanned the whole audit table (found by review).
CREATE INDEX audit_key_replaced ON audit(seq) WHERE kind = 'audit.key_replaced';
