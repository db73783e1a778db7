-- assent store schema: passkey enrolment codes (issue 14 §4, found by review). A passkey is
-- registered only with a one-time code an administrator issued (`assent passkeys enrol NAME`),
-- so a stolen operator key or session cannot enrol its own passkey. Stored by the SHA-256 of
-- the code; single use; until expires_at.
CREATE TABLE passkey_enrolments (
    code_sha256 TEXT COLLATE "C" PRIMARY KEY,
    principal   TEXT COLLATE "C" NOT NULL,
    issued_by   TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
