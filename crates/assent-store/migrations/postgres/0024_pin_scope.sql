-- assent store schema: a tool pin belongs to whoever reported the definitions (issue 4, review
-- finding "pins writable by one agent for all"). `scope` is '' for the gateway: the MCP hub of
-- `assent serve` reporting the upstreams of its own config (its pins and reviews hold for every
-- agent), or an agent's name for what that agent's own relay reported through
-- `POST /v1/tools/check` (its pins are shown, its reviews hold calls, only for that agent).
-- Existing rows become the gateway's: a pending review keeps holding every agent's calls until
-- an operator decides it, and the pins stay the baseline every agent's report is checked
-- against (nothing is trusted afresh on first use; fail closed).
ALTER TABLE tool_servers ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tool_servers DROP CONSTRAINT tool_servers_pkey;
ALTER TABLE tool_servers ADD PRIMARY KEY (scope, server);
ALTER TABLE tool_servers ALTER COLUMN scope DROP DEFAULT;

ALTER TABLE tool_pins ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tool_pins DROP CONSTRAINT tool_pins_pkey;
ALTER TABLE tool_pins ADD PRIMARY KEY (scope, server, tool);
ALTER TABLE tool_pins ALTER COLUMN scope DROP DEFAULT;

ALTER TABLE tool_reviews ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tool_reviews DROP CONSTRAINT tool_reviews_server_tool_fingerprint_key;
ALTER TABLE tool_reviews ADD CONSTRAINT tool_reviews_scope_key UNIQUE (scope, server, tool, fingerprint);
ALTER TABLE tool_reviews ALTER COLUMN scope DROP DEFAULT;
DROP INDEX tool_reviews_pending;
CREATE INDEX tool_reviews_pending ON tool_reviews(server, tool, status, scope);
CREATE INDEX tool_reviews_scope_pending ON tool_reviews(scope, server, status);
