-- assent store schema: sessions announced as cancelled (AAEP §6.8), so that
-- `aaep:agent.session.cancelled` is emitted exactly once per agent and session.
CREATE TABLE cancelled_sessions (
    agent       TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    at          BIGINT NOT NULL,              -- Unix milliseconds
    actor       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (agent, session_id)
);
