-- assent store schema: approving from Slack (issue 15 §4). The Slack message posted for an
-- approval (its channel and `ts`), so that any replica updates it with the outcome; and the
-- request signatures already accepted from Slack (by SHA-256), until their timestamp leaves
-- the 5-minute window, so that a replayed request is refused by every replica.
CREATE TABLE slack_messages (
    approval_id TEXT PRIMARY KEY,
    channel     TEXT NOT NULL,
    ts          TEXT NOT NULL,
    posted_at   INTEGER NOT NULL
);
CREATE TABLE slack_seen (
    signature_sha256 TEXT PRIMARY KEY,
    until            INTEGER NOT NULL
);
CREATE INDEX slack_seen_until ON slack_seen(until);
