-- assent store schema: a registered passkey's row carries a seal (HMAC-SHA256 under a key
-- derived from the audit key, `seal.rs`) over its credential id, principal, webauthn-rs
-- credential (with its signature counter) and public key, made when it is registered and
-- again after each use; the gateway offers, accepts and advances only a passkey whose seal
-- holds. Found by review: a database writer holding an operator's key planted a passkey of
-- their own as that operator's and signed approvals with it (or reset a counter so that a
-- cloned authenticator passed); `audit verify` found it only afterwards. Rows registered
-- before this migration have no seal ('') and sign nothing: register them again
-- (`assent passkeys enrol`).
ALTER TABLE passkeys ADD COLUMN seal TEXT NOT NULL DEFAULT '';
