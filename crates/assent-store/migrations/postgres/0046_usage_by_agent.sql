-- assent store schema: an agent's calls in all its sessions, by time. The agent-wide thresholds
-- (`rate.per: agent`, `cost.max_per_agent`) read the agent's calls inside their window (found by
-- review: the agent chooses its session id, so a count per session was the agent's to reset);
-- the index keeps that read proportional to the calls in the window, not to the history.
CREATE INDEX usage_agent_at ON usage(agent, at);
