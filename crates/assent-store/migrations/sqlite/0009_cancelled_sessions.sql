-- assent store schema: sessions announced as cancelled (AAEP §6.8), so that
-- `aaep:agent.session.cancelled` is emitted exactly once per agent and session.
CREATE TABLE cancelled_sessions (
    agent       TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    at          INTEGER NOT NULL,              -- Unix milliseconds
    actor       TEXT NOT NULL,
    PRIMARY KEY (agent, session_id)
);
