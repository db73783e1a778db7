-- assent store schema: a passkey enrolment code's row carries a seal (HMAC-SHA256 under a key
-- derived from the audit key, `seal.rs`) over its digest, principal, issuer and expiry, made
-- by `assent passkeys enrol`; the gateway takes only a code whose seal holds. Found by review:
-- a database writer holding an operator's key planted a row for a code of their own and
-- registered an authenticator as that operator. Rows issued before this migration have no
-- seal and are refused: issue a new code.
ALTER TABLE passkey_enrolments ADD COLUMN seal TEXT;
