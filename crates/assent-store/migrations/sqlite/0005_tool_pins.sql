-- assent store schema v5: MCP tool-list pinning (trust on first use, review of changes).
CREATE TABLE tool_servers (
    server          TEXT PRIMARY KEY,          -- MCP server alias
    first_seen      INTEGER NOT NULL
);

CREATE TABLE tool_pins (
    server          TEXT NOT NULL,
    tool            TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,             -- SHA-256 of canonical {name, description, inputSchema}
    definition      TEXT NOT NULL,             -- the pinned tool definition (JSON)
    pinned_at       INTEGER NOT NULL,
    pinned_by       TEXT NOT NULL,             -- 'trust-on-first-use' or the operator who accepted it
    PRIMARY KEY (server, tool)
);

CREATE TABLE tool_reviews (
    id              TEXT PRIMARY KEY,          -- UUID v4
    server          TEXT NOT NULL,
    tool            TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    definition      TEXT NOT NULL,             -- the new definition (JSON)
    seen_at         INTEGER NOT NULL,
    seen_by         TEXT NOT NULL,             -- the agent whose proxy saw it
    status          TEXT NOT NULL,             -- pending | accepted | rejected
    decided_by      TEXT,
    decided_at      INTEGER,
    UNIQUE (server, tool, fingerprint)
);
CREATE INDEX tool_reviews_pending ON tool_reviews(server, tool, status);
