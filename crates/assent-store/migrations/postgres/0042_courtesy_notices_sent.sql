-- assent store schema: the AAEP courtesy notices (§6.3.5) already sent, one row per
-- subscription, approval and kind (`confirmation`: a late `confirmation.reply`), so each is
-- sent at most once, by every replica and across restarts (found by review: every late reply
-- sent one more, and a subscriber could grow the event log as fast as it posted the same
-- reply). Retention removes the rows of subscriptions it removes.
CREATE TABLE aaep_courtesy_sent (
    subscription_id TEXT COLLATE "C" NOT NULL,
    approval_id     TEXT COLLATE "C" NOT NULL,
    kind            TEXT COLLATE "C" NOT NULL,
    at              BIGINT NOT NULL,
    PRIMARY KEY (subscription_id, approval_id, kind)
);
