-- assent store schema: a standing grant keeps what stood behind the decision that made it, as a
-- quorum vote does (migration 0038): the binding of the operator key it was made with (64 hex,
-- a SHA-256 over the key's digest under a tag of its own, made by the server), or the
-- channel's (`slack:` and the Slack user id; `sso:` and the identity and groups of a single
-- sign-on); the grant's seal covers it. NULL for a grant made before this migration. Start-up
-- revokes a grant whose binding is not its maker's current key's: a key rotated by editing the
-- file and restarting took back nothing its stolen predecessor had granted (found by review).
ALTER TABLE grants ADD COLUMN key_binding TEXT;
