-- assent store schema: the calls recorded under a plan, by plan. A plan's stop cancels the calls
-- held under it, revokes the grants made from them and voids their unredeemed tokens, each
-- found by `confirm_context.plan_id` in the stopping transaction (`plans.rs`,
-- `grants_revoke.rs`); without an index each stop scanned every call context ever recorded,
-- and the table grows with history (found by review). Partial: most calls name no plan.
CREATE INDEX confirm_context_plan ON confirm_context(plan_id) WHERE plan_id IS NOT NULL;
