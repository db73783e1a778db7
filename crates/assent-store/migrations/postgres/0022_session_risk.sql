-- assent store schema: risk that follows the session (issue 16 §3). Per agent session: when it
-- began (its first call that may run), and when untrusted output, private data and egress first
-- entered it and through which tool (a call of such a tool that may run: allowed, covered by a
-- grant, its token redeemed, or its result reported). Written in the proposal's transaction.
CREATE TABLE session_risk (
    agent            TEXT COLLATE "C" NOT NULL,
    session_id       TEXT COLLATE "C" NOT NULL,
    began_at         BIGINT NOT NULL,
    untrusted_at     BIGINT,
    untrusted_tool   TEXT COLLATE "C",
    untrusted_server TEXT COLLATE "C",
    private_at       BIGINT,
    private_tool     TEXT COLLATE "C",
    private_server   TEXT COLLATE "C",
    egress_at        BIGINT,
    egress_tool      TEXT COLLATE "C",
    egress_server    TEXT COLLATE "C",
    PRIMARY KEY (agent, session_id)
);
-- The effects of a held call whose session is marked when its token is redeemed.
CREATE TABLE session_risk_held (
    approval_id      TEXT COLLATE "C" PRIMARY KEY,
    untrusted_output BOOLEAN NOT NULL,
    private_data     BOOLEAN NOT NULL,
    egress           BOOLEAN NOT NULL
);
