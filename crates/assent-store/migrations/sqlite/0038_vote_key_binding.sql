-- assent store schema: a quorum vote cast with an operator key keeps that key's binding
-- (key_binding: 64 hex digits, a SHA-256 over the key's digest under a tag of its own, made by
-- the server), and the vote's seal covers it; NULL for a vote cast by single sign-on, through
-- Slack, or before this migration. Start-up withdraws a pending approval's vote whose binding
-- is not its voter's current key's: a key rotated by editing the file and restarting took back
-- nothing its stolen predecessor had voted (found by review).
ALTER TABLE votes ADD COLUMN key_binding TEXT;
