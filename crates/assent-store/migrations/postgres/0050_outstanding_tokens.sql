-- assent store schema: the tokens neither redeemed nor expired, by expiry. Withdrawn consent
-- (a grant revoked, a reload or restart removing an operator or changing their key or roles)
-- voids the outstanding tokens in its write transaction (`crate::voided`); without an index
-- each voiding scanned every token ever minted, and the table grows with history (found by
-- review). Partial: a redeemed or voided token (`used_at` set) leaves the index.
CREATE INDEX tokens_outstanding ON tokens(expires_at) WHERE used_at IS NULL;
