-- assent store schema: passkey-signed approvals (issue 14 §4). Operators' registered passkeys
-- (the webauthn-rs credential, its public key as a JWK), the ceremonies in progress (the
-- webauthn-rs state, bound to a principal and, for a vote, to an approval, its call_hash and
-- the decision; single use, until expires_at), whether an approval needs a passkey-signed
-- approval, and the proof stored with each vote and decision.
CREATE TABLE passkeys (
    credential_id TEXT COLLATE "C" PRIMARY KEY,            -- base64url
    principal     TEXT COLLATE "C" NOT NULL,
    passkey       TEXT NOT NULL,               -- webauthn-rs Passkey (JSON)
    public_key    TEXT NOT NULL,               -- JWK (JSON)
    label         TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX passkeys_principal ON passkeys(principal);
CREATE TABLE passkey_ceremonies (
    id          TEXT COLLATE "C" PRIMARY KEY,
    principal   TEXT COLLATE "C" NOT NULL,
    purpose     TEXT NOT NULL CHECK (purpose IN ('register', 'vote')),
    approval_id TEXT COLLATE "C",
    call_hash   TEXT COLLATE "C",
    decision    TEXT,
    nonce       TEXT,
    state       TEXT NOT NULL,                 -- webauthn-rs ceremony state (JSON)
    expires_at  BIGINT NOT NULL
);
ALTER TABLE approvals ADD COLUMN require_passkey BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE votes ADD COLUMN passkey TEXT;
ALTER TABLE decisions ADD COLUMN passkey TEXT;
