-- assent store schema v6: approvals the agent's own user may decide in the MCP client.
ALTER TABLE approvals ADD COLUMN in_client INTEGER NOT NULL DEFAULT 0;
