-- assent store schema v5: MCP tool-list pinning (trust on first use, review of changes).
CREATE TABLE tool_servers (
    server          TEXT COLLATE "C" PRIMARY KEY,          -- MCP server alias
    first_seen      BIGINT NOT NULL
);

CREATE TABLE tool_pins (
    server          TEXT COLLATE "C" NOT NULL,
    tool            TEXT COLLATE "C" NOT NULL,
    fingerprint     TEXT COLLATE "C" NOT NULL,             -- SHA-256 of canonical {name, description, inputSchema}
    definition      TEXT COLLATE "C" NOT NULL,             -- the pinned tool definition (JSON)
    pinned_at       BIGINT NOT NULL,
    pinned_by       TEXT COLLATE "C" NOT NULL,             -- 'trust-on-first-use' or the operator who accepted it
    PRIMARY KEY (server, tool)
);

CREATE TABLE tool_reviews (
    id              TEXT COLLATE "C" PRIMARY KEY,          -- UUID v4
    server          TEXT COLLATE "C" NOT NULL,
    tool            TEXT COLLATE "C" NOT NULL,
    fingerprint     TEXT COLLATE "C" NOT NULL,
    definition      TEXT COLLATE "C" NOT NULL,             -- the new definition (JSON)
    seen_at         BIGINT NOT NULL,
    seen_by         TEXT COLLATE "C" NOT NULL,             -- the agent whose proxy saw it
    status          TEXT COLLATE "C" NOT NULL,             -- pending | accepted | rejected
    decided_by      TEXT COLLATE "C",
    decided_at      BIGINT,
    UNIQUE (server, tool, fingerprint),
    rowid           BIGINT GENERATED ALWAYS AS IDENTITY  -- SQLite's implicit rowid (ORDER BY … rowid)
);
CREATE INDEX tool_reviews_pending ON tool_reviews(server, tool, status);
