-- assent store schema: the agent whose MPLP plan gated a held call when it was held (the plan's
-- registered agent; NULL when the call named no plan, the plan did not exist yet, or the call
-- was held before this migration). Stopping the plan reaches the call by what was recorded,
-- not only by the delegations configured now (found by review: a reload removing an
-- orchestrator's delegation released its delegate's held calls and tokens from the stopped
-- plan they were made under).
ALTER TABLE confirm_context ADD COLUMN plan_owner TEXT COLLATE "C";
