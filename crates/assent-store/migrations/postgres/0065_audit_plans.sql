-- assent store schema: the audit records that move an MPLP plan, by their place in the chain.
-- Retention carries each plan's newest record before it deletes it (`retention_carry.rs`
-- `carry_plans`), reading the plan records after the archived range, and `audit verify`
-- reads every plan record (`integrity_plans.rs`); without this index each read scanned the
-- whole live chain, the first inside retention's write transaction (found by review).
-- Partial: few records are a plan's.
CREATE INDEX audit_plans ON audit(seq) WHERE kind IN ('plan.created', 'plan.updated', 'plan.submitted', 'plan.approved', 'plan.rejected', 'plan.cancelled');
