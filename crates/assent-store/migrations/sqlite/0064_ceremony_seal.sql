-- assent store schema: a passkey ceremony's row carries a seal (HMAC-SHA256 under a key
-- derived from the audit key, `seal.rs`) over everything it holds — principal, purpose, the
-- approval, call and decision of a vote, the webauthn state (its challenge), expiry and the
-- enrolment code's digest. The gateway takes no ceremony whose seal does not hold. Found by
-- review: a database writer holding an operator's key read a genuine enrolment code's digest
-- and planted a registration ceremony carrying it, with a challenge of their own, then
-- finished it with their authenticator. Ceremonies started before this migration (5 minutes'
-- lifetime) are not taken: start again.
ALTER TABLE passkey_ceremonies ADD COLUMN seal TEXT;
