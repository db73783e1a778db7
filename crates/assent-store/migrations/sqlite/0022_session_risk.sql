-- assent store schema: risk that follows the session (issue 16 §3). Per agent session: when it
-- began (its first call that may run), and when untrusted output, private data and egress first
-- entered it and through which tool (a call of such a tool that may run: allowed, covered by a
-- grant, its token redeemed, or its result reported). Written in the proposal's transaction.
CREATE TABLE session_risk (
    agent            TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    began_at         INTEGER NOT NULL,
    untrusted_at     INTEGER,
    untrusted_tool   TEXT,
    untrusted_server TEXT,
    private_at       INTEGER,
    private_tool     TEXT,
    private_server   TEXT,
    egress_at        INTEGER,
    egress_tool      TEXT,
    egress_server    TEXT,
    PRIMARY KEY (agent, session_id)
);
-- The effects of a held call whose session is marked when its token is redeemed.
CREATE TABLE session_risk_held (
    approval_id      TEXT PRIMARY KEY,
    untrusted_output INTEGER NOT NULL,
    private_data     INTEGER NOT NULL,
    egress           INTEGER NOT NULL
);
