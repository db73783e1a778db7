-- assent store schema: audit retention (issue 13 §3). One row per archive run: the signed
-- manifest of the export file its records went to before they were deleted. The newest row is
-- the anchor the remaining chain starts from (its first record's prev_hash is `last_hash`).
CREATE TABLE audit_archives (
    last_seq        BIGINT PRIMARY KEY,        -- seq of the last archived record
    first_seq       BIGINT NOT NULL,           -- seq of the first record of the export
    first_prev_hash TEXT COLLATE "C" NOT NULL, -- its prev_hash (the previous anchor's last_hash, or 64 zeros)
    last_hash       TEXT COLLATE "C" NOT NULL, -- the last archived record's chain hash
    record_count    BIGINT NOT NULL,           -- records in the export (last_seq - first_seq + 1)
    records_sha256  TEXT COLLATE "C" NOT NULL, -- SHA-256 of the export's record lines
    file            TEXT COLLATE "C" NOT NULL, -- the export's file name in data_dir/archive
    cutoff          BIGINT NOT NULL,           -- records older than this (Unix ms) were due
    archived_at     BIGINT NOT NULL,           -- when (Unix ms)
    public_key      TEXT COLLATE "C" NOT NULL, -- Ed25519 audit public key, 64 hex characters
    signature       TEXT COLLATE "C" NOT NULL  -- Ed25519 signature of the manifest, 128 hex characters
);
