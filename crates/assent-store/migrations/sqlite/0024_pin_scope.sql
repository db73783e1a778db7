-- assent store schema: a tool pin belongs to whoever reported the definitions (issue 4, review
-- finding "pins writable by one agent for all"). `scope` is '' for the gateway: the MCP hub of
-- `assent serve` reporting the upstreams of its own config (its pins and reviews hold for every
-- agent), or an agent's name for what that agent's own relay reported through
-- `POST /v1/tools/check` (its pins are shown, its reviews hold calls, only for that agent).
-- Existing rows become the gateway's: a pending review keeps holding every agent's calls until
-- an operator decides it, and the pins stay the baseline every agent's report is checked
-- against (nothing is trusted afresh on first use; fail closed).
CREATE TABLE tool_servers_scoped (
    scope           TEXT NOT NULL,             -- '' (the gateway's hub) or the reporting agent
    server          TEXT NOT NULL,             -- MCP server alias
    first_seen      INTEGER NOT NULL,
    PRIMARY KEY (scope, server)
);
INSERT INTO tool_servers_scoped (scope, server, first_seen) SELECT '', server, first_seen FROM tool_servers;
DROP TABLE tool_servers;
ALTER TABLE tool_servers_scoped RENAME TO tool_servers;

CREATE TABLE tool_pins_scoped (
    scope           TEXT NOT NULL,             -- '' (the gateway's hub) or the reporting agent
    server          TEXT NOT NULL,
    tool            TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,             -- SHA-256 of canonical {name, description, inputSchema}
    definition      TEXT NOT NULL,             -- the pinned tool definition (JSON)
    pinned_at       INTEGER NOT NULL,
    pinned_by       TEXT NOT NULL,             -- 'trust-on-first-use' or the operator who accepted it
    PRIMARY KEY (scope, server, tool)
);
INSERT INTO tool_pins_scoped (scope, server, tool, fingerprint, definition, pinned_at, pinned_by)
    SELECT '', server, tool, fingerprint, definition, pinned_at, pinned_by FROM tool_pins;
DROP TABLE tool_pins;
ALTER TABLE tool_pins_scoped RENAME TO tool_pins;

CREATE TABLE tool_reviews_scoped (
    id              TEXT PRIMARY KEY,          -- UUID v4
    scope           TEXT NOT NULL,             -- '' (the gateway's hub) or the reporting agent
    server          TEXT NOT NULL,
    tool            TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    definition      TEXT NOT NULL,             -- the new definition (JSON)
    seen_at         INTEGER NOT NULL,
    seen_by         TEXT NOT NULL,             -- the agent whose proxy (or hub session) saw it
    status          TEXT NOT NULL,             -- pending | accepted | rejected
    decided_by      TEXT,
    decided_at      INTEGER,
    UNIQUE (scope, server, tool, fingerprint)
);
INSERT INTO tool_reviews_scoped (rowid, id, scope, server, tool, fingerprint, definition, seen_at, seen_by, status, decided_by, decided_at)
    SELECT rowid, id, '', server, tool, fingerprint, definition, seen_at, seen_by, status, decided_by, decided_at FROM tool_reviews;
DROP TABLE tool_reviews;
ALTER TABLE tool_reviews_scoped RENAME TO tool_reviews;
CREATE INDEX tool_reviews_pending ON tool_reviews(server, tool, status, scope);
CREATE INDEX tool_reviews_scope_pending ON tool_reviews(scope, server, status);
