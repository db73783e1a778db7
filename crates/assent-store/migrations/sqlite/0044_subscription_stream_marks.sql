-- assent store schema: how many times a stream marked an AAEP subscription seen (each
-- `touch_subscription` adds one, in the database). A bare stream's subscription is closed after
-- its grace only if the count is still what it was when its last stream ended: a compare-and-
-- close in one statement, with no clock compared. Found by review: the close compared the
-- ending replica's clock with the `last_seen_at` another replica wrote, so a skew over the
-- grace's margin closed a live subscription reopened there, and a reopen by id in the same
-- process at the very end of the grace could be accepted and then closed.
ALTER TABLE aaep_subscriptions ADD COLUMN stream_marks INTEGER NOT NULL DEFAULT 0;
