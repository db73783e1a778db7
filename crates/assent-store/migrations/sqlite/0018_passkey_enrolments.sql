-- assent store schema: passkey enrolment codes (issue 14 §4, found by review). A passkey is
-- registered only with a one-time code an administrator issued (`assent passkeys enrol NAME`),
-- so a stolen operator key or session cannot enrol its own passkey. Stored by the SHA-256 of
-- the code; single use; until expires_at.
CREATE TABLE passkey_enrolments (
    code_sha256 TEXT PRIMARY KEY,
    principal   TEXT NOT NULL,
    issued_by   TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
