-- assent store schema: a passkey registration ceremony keeps the SHA-256 of the one-time
-- enrolment code it was started with; the code is used up only when the registration
-- finishes (in the transaction that stores the passkey), so a cancelled browser prompt does
-- not burn it, and one code never registers two credentials. NULL for vote ceremonies and
-- for ceremonies started before this migration (whose code was used at their start).
ALTER TABLE passkey_ceremonies ADD COLUMN code_sha256 TEXT;
