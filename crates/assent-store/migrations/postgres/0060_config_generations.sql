-- assent store schema: the configurations (principals, agents and policies) the replicas of
-- one database have loaded, newest generation last (issue 13 §2). A replica whose
-- configuration is not the newest neither serves nor withdraws what a newer one stands
-- behind (`config_generations.rs`; found by review: a replica restarted with an older file
-- withdrew the votes, grants and tokens of operators a newer one had added).
CREATE TABLE config_generations (
    digest     TEXT PRIMARY KEY,           -- SHA-256 (hex) of the configuration's consent-relevant part
    generation BIGINT NOT NULL UNIQUE,   -- 1, 2, 3, ...: the newest is the largest
    loaded_at  BIGINT NOT NULL,          -- Unix ms it (last) became the newest
    loaded_by  TEXT NOT NULL            -- the replica that loaded it (host and process)
);
-- The replicas serving now, each with the digest it serves: renewed every 2 s, removed at a
-- graceful stop. A replica may start with a configuration other than a live replica's only
-- when told to adopt it (`serve --adopt-config`).
CREATE TABLE config_replicas (
    holder  TEXT PRIMARY KEY,              -- the replica (host and process)
    digest  TEXT NOT NULL,                 -- the configuration it serves
    seen_at BIGINT NOT NULL              -- Unix ms it last said so (the database's clock on PostgreSQL)
);
