-- assent store schema: when an AAEP subscription's stream was last open (Unix ms), touched when
-- a stream opens and at most hourly while it stays open; NULL before this migration (its
-- `created_at` stands in). Retention removes a subscription no stream has opened since the
-- cut-off, closed or not: one was made for every event stream opened without an id and never
-- closed, and every held call read them all for their timeout extensions (found by review).
ALTER TABLE aaep_subscriptions ADD COLUMN last_seen_at INTEGER;
