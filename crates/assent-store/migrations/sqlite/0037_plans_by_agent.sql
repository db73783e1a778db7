-- assent store schema: plans by agent and status, for the cap on an agent's open plans (drafts
-- and plans under review, max_pending_per_agent) counted on every new plan. Before, nothing
-- bounded how many an agent kept open; the plans it finished or cancelled are kept, like its
-- approvals, and what it stores is bounded by its rate limit.
CREATE INDEX plans_by_agent ON plans (agent, status);
