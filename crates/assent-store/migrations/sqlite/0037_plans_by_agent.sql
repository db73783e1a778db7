-- assent store schema: plans by agent and status, for the cap on an agent's open plans (drafts
-- and plans under review, max_pending_per_agent) counted on every new plan. Before, nothing
-- bounded them: an agent key could fill the disk with drafts.
CREATE INDEX plans_by_agent ON plans (agent, status);
