-- assent store schema: an approval's `token.voided` record by its approval id. A redemption
-- refuses a token whose approval has its `token.redeemed` (index `audit_redeemed`, 0053) or
-- `token.voided` record, whatever the token row's `used_at` says; without this index the
-- second look-up read the whole audit log under the write lock at every redemption (found
-- by review). Partial: few records are voidings.
CREATE INDEX audit_voided ON audit(approval_id) WHERE kind = 'token.voided';
